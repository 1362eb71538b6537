package conf

import (
	"strconv"
	"strings"
)

// Errors collects the errors of one document, each with the path of its field, so that an
// operator sees every mistake at once.
type Errors struct {
	Source string // the document's name, e.g. its file name
	List   []FieldError

	describe *[]Field // the fields read so far, when Describe runs the reader
}

// FieldError is one invalid field.
type FieldError struct {
	Path   string // e.g. "rules[2].limit.rate"
	Reason string
}

// Add records an error at path.
func (e *Errors) Add(path, reason string) {
	e.List = append(e.List, FieldError{Path: path, Reason: reason})
}

// Err returns e if it holds errors, else nil.
func (e *Errors) Err() error {
	if len(e.List) == 0 {
		return nil
	}
	return e
}

// Error lists every error, one per line: "source: path: reason".
func (e *Errors) Error() string {
	var b strings.Builder
	for i, f := range e.List {
		if i > 0 {
			b.WriteByte('\n')
		}
		if e.Source != "" {
			b.WriteString(e.Source)
			b.WriteString(": ")
		}
		if f.Path != "" {
			b.WriteString(f.Path)
			b.WriteString(": ")
		}
		b.WriteString(f.Reason)
	}
	return b.String()
}

// Obj reads the fields of one object of a document. Each getter takes the field's default,
// which it returns when the field is absent or invalid (the error is recorded); Done then
// reports the fields nobody asked for, so that a misspelt key is an error, not a silent default.
type Obj struct {
	path string
	o    *Object
	read []bool
	errs *Errors
	bad  bool // the value is not an object: that error says it all, Require adds nothing
}

// Read starts reading v, which must be an object, as the document's root (path "").
func Read(v Value, errs *Errors) *Obj { return readObj("", v, errs) }

// At returns an empty object at path whose errors go to errs: for a check of a value that was
// not read from a document (a typed config), to record its errors with the paths a document's
// would have, and to ask Failed of the fields a reader reported already.
func At(path string, errs *Errors) *Obj { return readObj(path, nil, errs) }

func readObj(path string, v Value, errs *Errors) *Obj {
	o, ok := v.(*Object)
	bad := !ok && v != nil
	if bad {
		errs.Add(path, "must be an object, got "+kind(v))
	}
	if !ok {
		o = &Object{}
	}
	return &Obj{path: path, o: o, read: make([]bool, len(o.Keys)), errs: errs, bad: bad}
}

// Path returns the path of key in this object, for error messages.
func (o *Obj) Path(key string) string {
	if o.path == "" {
		return key
	}
	return o.path + "." + key
}

// Fail records an error on key.
func (o *Obj) Fail(key, reason string) { o.errs.Add(o.Path(key), reason) }

// Has reports whether the object has key. Described (see Describe), every key is there, so
// that a reader takes the branch that reads the field.
func (o *Obj) Has(key string) bool {
	if o.describing() {
		return true
	}
	_, ok := o.o.Get(key)
	return ok
}

// NotAnObject reports whether the value o reads is not an object (said so already).
func (o *Obj) NotAnObject() bool { return o.bad }

// IsNull reports whether key holds null.
func (o *Obj) IsNull(key string) bool {
	v, ok := o.o.Get(key)
	return ok && v == nil
}

// IsBool reports whether key holds true or false: for a field that takes a boolean or another
// form.
func (o *Obj) IsBool(key string) bool {
	v, _ := o.o.Get(key)
	_, ok := v.(bool)
	return ok
}

// Raw returns key's value as the document holds it, marking it read: for a field whose
// contents are free-form (envoyproxy/ratelimit's descriptor metadata), converted by its reader.
func (o *Obj) Raw(key string) (Value, bool) { return o.get(key) }

// get returns key's value and marks it read; a null counts as absent.
func (o *Obj) get(key string) (Value, bool) {
	for i, k := range o.o.Keys {
		if k == key {
			o.read[i] = true
			return o.o.Vals[i], o.o.Vals[i] != nil
		}
	}
	return nil, false
}

// Require records an error for each key that is absent or null (as the getters, it counts a
// null as absent). It records nothing on a value that is not an object, already reported.
func (o *Obj) Require(keys ...string) {
	if o.bad {
		return
	}
	for _, k := range keys {
		if o.describing() {
			o.note(k, Field{Required: true})
		}
		if v, ok := o.o.Get(k); !ok || v == nil {
			o.Fail(k, "is required")
		}
	}
}

// String reads a string.
func (o *Obj) String(key, def string) string {
	if o.describing() {
		o.note(key, Field{Type: "string", Default: def})
	}
	v, ok := o.get(key)
	if !ok {
		return def
	}
	s, ok := v.(string)
	if !ok {
		o.Fail(key, "must be a string, got "+kind(v))
		return def
	}
	return s
}

// A Form is a string's form: a regular expression that Go's regexp and JSON Schema's patterns
// (ECMA-262) read alike. *regexp.Regexp is one; Describe records it as the field's pattern.
type Form interface {
	MatchString(s string) bool
	String() string
}

// Matching reads a string of the form re; what says the form in the error.
func (o *Obj) Matching(key, def string, re Form, what string) string {
	if o.describing() {
		o.note(key, Field{Type: "string", Default: def, Pattern: re.String()})
	}
	v, _ := o.get(key)
	s := o.String(key, def)
	if _, ok := v.(string); ok && !re.MatchString(s) {
		o.Fail(key, "must be "+what+", got "+strconv.Quote(s))
	}
	return s
}

// StringsMatching reads strings (Strings), each of the form re; what says the form in the
// error, which names the first that is not.
func (o *Obj) StringsMatching(key string, re Form, what string) []string {
	if o.describing() {
		o.note(key, Field{Type: "strings", Pattern: re.String()})
	}
	l := o.Strings(key)
	for _, s := range l {
		if !re.MatchString(s) {
			o.Fail(key, "each must be "+what+", got "+strconv.Quote(s))
			break
		}
	}
	return l
}

// Enum reads a string that must be one of allowed.
func (o *Obj) Enum(key, def string, allowed ...string) string {
	if o.describing() {
		o.note(key, Field{Type: "string", Default: def, Enum: allowed})
	}
	if !o.Has(key) {
		return def
	}
	s := o.String(key, def)
	for _, a := range allowed {
		if s == a {
			return s
		}
	}
	o.Fail(key, "must be one of "+strings.Join(allowed, ", ")+", got "+strconv.Quote(s))
	return def
}

// EnumIndex reads an enum field, as Enum with allowed[0] for its default, and returns the index
// of its value in allowed.
func (o *Obj) EnumIndex(key string, allowed ...string) int {
	v := o.Enum(key, allowed[0], allowed...)
	for i, a := range allowed {
		if a == v {
			return i
		}
	}
	return 0
}

// Bool reads a boolean.
func (o *Obj) Bool(key string, def bool) bool {
	if o.describing() {
		o.note(key, Field{Type: "boolean", Default: def})
	}
	v, ok := o.get(key)
	if !ok {
		return def
	}
	b, ok := v.(bool)
	if !ok {
		o.Fail(key, "must be true or false, got "+kind(v))
		return def
	}
	return b
}

// Int reads an integer in [min, max].
func (o *Obj) Int(key string, def, min, max int64) int64 {
	if o.describing() {
		o.note(key, Field{Type: "integer", Default: def, Min: min, Max: max})
	}
	v, ok := o.get(key)
	if !ok {
		return def
	}
	n, isNum := v.(Number)
	if !isNum {
		o.Fail(key, "must be an integer, got "+kind(v))
		return def
	}
	i, err := strconv.ParseInt(string(n), 10, 64)
	if err != nil {
		o.Fail(key, "must be an integer between "+itoa(min)+" and "+itoa(max)+", got "+string(n))
		return def
	}
	return o.between(key, i, def, min, max, itoa)
}

// Duration reads a duration in µs, written with units: "250ms", "1m30s", "1h", "7d" (units us
// or µs, ms, s, m, h, d). A bare number is refused: "60" could mean seconds or milliseconds.
func (o *Obj) Duration(key string, def, min, max int64) int64 {
	if o.describing() {
		o.note(key, Field{Type: "duration", Default: FormatDuration(def), Min: min, Max: max})
	}
	v, ok := o.get(key)
	if !ok {
		return def
	}
	s, isStr := v.(string)
	if !isStr {
		o.Fail(key, "must be a duration with a unit such as \"500ms\", \"1s\" or \"1m\", got "+kind(v))
		return def
	}
	d, reason := ParseDuration(s)
	if reason != "" {
		o.Fail(key, reason)
		return def
	}
	return o.between(key, d, def, min, max, FormatDuration)
}

func (o *Obj) between(key string, v, def, min, max int64, format func(int64) string) int64 {
	if !o.check(key, v, min, max, format) {
		return def
	}
	return v
}

func (o *Obj) check(key string, v, min, max int64, format func(int64) string) bool {
	if v < min || v > max {
		o.Fail(key, "must be between "+format(min)+" and "+format(max)+", got "+format(v))
		return false
	}
	return true
}

// CheckInt records, as Int would, that the integer v of key is not in [min, max], and reports
// whether it is.
func (o *Obj) CheckInt(key string, v, min, max int64) bool {
	return o.check(key, v, min, max, itoa)
}

// CheckDuration records, as Duration would, that the duration v (µs) of key is not in
// [min, max], and reports whether it is.
func (o *Obj) CheckDuration(key string, v, min, max int64) bool {
	return o.check(key, v, min, max, FormatDuration)
}

// Strings reads a list of strings; a single string counts as a list of one.
func (o *Obj) Strings(key string) []string {
	if o.describing() {
		o.note(key, Field{Type: "strings"})
	}
	v, ok := o.get(key)
	if !ok {
		return nil
	}
	if s, ok := v.(string); ok {
		return []string{s}
	}
	l, ok := v.([]Value)
	if !ok {
		o.Fail(key, "must be a list of strings, got "+kind(v))
		return nil
	}
	out := make([]string, 0, len(l))
	for i, e := range l {
		s, ok := e.(string)
		if !ok {
			o.errs.Add(o.Path(key)+"["+itoa(int64(i))+"]", "must be a string, got "+kind(e))
			continue
		}
		out = append(out, s)
	}
	return out
}

// StringMap reads an object whose values are strings, in document order.
func (o *Obj) StringMap(key string) (keys, vals []string) {
	if o.describing() {
		o.note(key, Field{Type: "string_map"})
	}
	v, ok := o.get(key)
	if !ok {
		return nil, nil
	}
	m, ok := v.(*Object)
	if !ok {
		o.Fail(key, "must be an object of strings, got "+kind(v))
		return nil, nil
	}
	for i, k := range m.Keys {
		s, ok := m.Vals[i].(string)
		if !ok {
			o.errs.Add(o.Path(key)+"."+k, "must be a string, got "+kind(m.Vals[i]))
			continue
		}
		keys, vals = append(keys, k), append(vals, s)
	}
	return keys, vals
}

// Decimal reads a non-negative decimal number of at most 6 decimal places and at most max ("0.5",
// "2.50"), and returns its text, or "" when it is absent or invalid (the error is recorded): for
// a weight or a price, which a reader turns into exact fixed-point units.
func (o *Obj) Decimal(key string, max int64) string {
	if o.describing() {
		o.note(key, Field{Type: "number", Min: 0, Max: max})
	}
	v, ok := o.get(key)
	if !ok {
		return ""
	}
	n, isNum := v.(Number)
	if !isNum {
		o.Fail(key, "must be a number, got "+kind(v))
		return ""
	}
	s := string(n)
	whole, frac, _ := strings.Cut(s, ".")
	switch {
	case strings.ContainsAny(s, "eE-"):
		o.Fail(key, "must be a number from 0 to "+itoa(max)+" written in plain decimal, got "+s)
	case len(frac) > 6:
		o.Fail(key, "must have at most 6 decimal places, got "+s)
	case len(whole) > 18 || len(whole) > len(itoa(max)) || whole > itoa(max) && len(whole) == len(itoa(max)) ||
		whole == itoa(max) && strings.Trim(frac, "0") != "":
		o.Fail(key, "must be at most "+itoa(max)+", got "+s)
	default:
		return s
	}
	return ""
}

// ObjMap reads an object whose values are objects, each read by read with its key, in document
// order: for a table keyed by names the operator chooses (a price per model). Described, read is
// called once, with the key "*".
func (o *Obj) ObjMap(key string, read func(k string, v *Obj)) {
	if o.describing() {
		o.note(key, Field{Type: "object_map"})
		read("*", readObj(o.Path(key)+".*", nil, o.errs))
		return
	}
	v, ok := o.get(key)
	if !ok {
		return
	}
	m, ok := v.(*Object)
	if !ok {
		o.Fail(key, "must be an object, got "+kind(v))
		return
	}
	for i, k := range m.Keys {
		read(k, readObj(o.Path(key)+"."+k, m.Vals[i], o.errs))
	}
}

// Obj reads a nested object; an absent one reads as empty, so its defaults apply.
func (o *Obj) Obj(key string) *Obj {
	if o.describing() {
		o.note(key, Field{Type: "object"})
	}
	v, _ := o.get(key)
	return readObj(o.Path(key), v, o.errs)
}

// List reads a list of objects.
func (o *Obj) List(key string) []*Obj {
	if o.describing() {
		o.note(key, Field{Type: "list"})
		return []*Obj{readObj(o.Path(key)+"[]", nil, o.errs)}
	}
	v, ok := o.get(key)
	if !ok {
		return nil
	}
	l, ok := v.([]Value)
	if !ok {
		o.Fail(key, "must be a list, got "+kind(v))
		return nil
	}
	out := make([]*Obj, len(l))
	for i, e := range l {
		p := o.Path(key) + "[" + itoa(int64(i)) + "]"
		if e == nil { // readObj reports the other non-objects, but takes null for an absent object
			o.errs.Add(p, "must be an object, got null")
		}
		out[i] = readObj(p, e, o.errs)
		out[i].bad = out[i].bad || e == nil
	}
	return out
}

// Objs reads a list of objects; a single object counts as a list of one, as a single string
// does for Strings.
func (o *Obj) Objs(key string) []*Obj {
	if o.describing() {
		o.note(key, Field{Type: "objects"})
		return []*Obj{readObj(o.Path(key)+"[]", nil, o.errs)}
	}
	if v, ok := o.o.Get(key); ok {
		if _, one := v.(*Object); one {
			o.get(key)
			return []*Obj{readObj(o.Path(key), v, o.errs)}
		}
	}
	return o.List(key)
}

// Sink returns an empty object at o's path whose errors go to o's: for the checks of values
// read from o, which must record their errors where o's are without reading o again.
func (o *Obj) Sink() *Obj { return At(o.path, o.errs) }

// FailedWithin reports whether an error is recorded on key or on any field inside it.
func (o *Obj) FailedWithin(key string) bool {
	p := o.Path(key)
	for _, e := range o.errs.List {
		if rest, ok := strings.CutPrefix(e.Path, p); ok && (rest == "" || rest[0] == '.' || rest[0] == '[') {
			return true
		}
	}
	return false
}

// Failed reports whether an error is recorded on one of keys of o already (to say nothing more
// of a field whose value was wrong).
func (o *Obj) Failed(keys ...string) bool {
	for _, e := range o.errs.List {
		for _, k := range keys {
			if e.Path == o.Path(k) {
				return true
			}
		}
	}
	return false
}

// Refuse records reason on key if the object holds it (not null): for a field that another
// field's value rules out. Done then says nothing more of it.
func (o *Obj) Refuse(key, reason string) {
	if _, ok := o.get(key); ok {
		o.Fail(key, reason)
	}
}

// UnknownField is the reason Done gives.
const UnknownField = "unknown field"

// Done records an error for every field that no getter read.
func (o *Obj) Done() {
	if o.describing() {
		o.note("", Field{Closed: true})
	}
	for i, k := range o.o.Keys {
		if !o.read[i] {
			o.Fail(k, UnknownField)
		}
	}
}

// kind names v's type for messages.
func kind(v Value) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case Number:
		return "the number " + string(v)
	case string:
		return "the string " + strconv.Quote(v)
	case []Value:
		return "a list"
	case *Object:
		return "an object"
	}
	return "an unknown value"
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// Errors returns the errors recorded so far on the whole document.
func (o *Obj) Errors() *Errors { return o.errs }
