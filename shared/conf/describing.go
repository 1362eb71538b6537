//go:build !tinygo

package conf

// describing reports whether o is being described (see Describe), not read.
func (o *Obj) describing() bool { return o.errs.describe != nil }
