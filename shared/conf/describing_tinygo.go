//go:build tinygo

package conf

// describing is false in the TinyGo builds (the Envoy filter), which never describe a
// document: the recording code is left out of them.
func (o *Obj) describing() bool { return false }
