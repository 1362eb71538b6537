package conf

// A document's grammar is stated once, by the reader that decodes it: each getter names its
// field, its type, its default and its bounds. Describe runs a reader over no document and
// records those calls, so that what is derived from the grammar (the JSON Schemas, the Kong
// plugin's field table, the docs' tables) comes from the same calls that decode a document
// and cannot drift from them.
//
// A reader that branches on a value follows its default branch here: what a branch would read
// besides is for the caller to state (schema/src holds those statements, with the prose).

// Field is what a reader states about one field of a document.
type Field struct {
	// Path is the field's path, as in errors; a list's items are "[]": "upstreams[].name".
	Path string
	// Type is one of string, boolean, integer, duration (a string with a unit), strings (a
	// string or a list of strings), string_map (an object of strings), object, list (of
	// objects), objects (an object or a list of them), number (a decimal) or object_map (an
	// object of objects, whose fields are described under "KEY.*").
	Type     string
	Default  any      // string, bool or int64; a duration's is its text ("50ms"); nil: none
	Enum     []string // the allowed strings of an enum, the default first for EnumIndex
	Min, Max int64    // an integer's or a duration's bounds (a duration's in µs)
	Pattern  string   // a string's form (Matching), or each string's (StringsMatching)
	Required bool     // Require names it
	Closed   bool     // an object whose reader calls Done: no other fields
}

// Describe runs read over an empty object at the root of a document being described, and
// returns the fields it reads, in the order it reads them; a field read twice (a getter, then
// Require) is one Field.
func Describe(read func(*Obj)) []Field {
	errs := &Errors{describe: &[]Field{}}
	read(readObj("", nil, errs))
	return *errs.describe
}

// note records f at key of o, merged with what was recorded there before.
func (o *Obj) note(key string, f Field) {
	f.Path = o.Path(key)
	if key == "" {
		f.Path = o.path
	}
	list := o.errs.describe
	for i := range *list {
		g := &(*list)[i]
		if g.Path != f.Path {
			continue
		}
		g.Required = g.Required || f.Required
		g.Closed = g.Closed || f.Closed
		if g.Type == "" {
			f.Required, f.Closed = g.Required, g.Closed
			*g = f
		}
		return
	}
	*list = append(*list, f)
}
