// Package conf holds the tree a config document decodes to, whatever its syntax (JSON here,
// YAML in the config package), and a reader that turns that tree into typed values while
// collecting every error with the path of the field and the reason.
//
// It uses no reflection and compiles under TinyGo, so every front end (dianad, the Kong plugin,
// the Envoy filter) validates configs with the same code and the same messages.
package conf

// Value is one node of a document: nil, bool, Number, string, []Value or *Object.
type Value any

// Number is a number as written in the document; the reader decides whether it must be an
// integer.
type Number string

// Object is a mapping that keeps the order of its keys, so that errors come in document order.
type Object struct {
	Keys []string
	Vals []Value
}

// Get returns the value of key and whether the object has it.
func (o *Object) Get(key string) (Value, bool) {
	for i, k := range o.Keys {
		if k == key {
			return o.Vals[i], true
		}
	}
	return nil, false
}

// Set sets key to v, adding the key at the end when it is new.
func (o *Object) Set(key string, v Value) {
	for i, k := range o.Keys {
		if k == key {
			o.Vals[i] = v
			return
		}
	}
	o.Keys = append(o.Keys, key)
	o.Vals = append(o.Vals, v)
}
