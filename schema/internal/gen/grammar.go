package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"regexp"
	"strconv"
	"strings"

	"github.com/diana-gw/diana/schema"
	"github.com/diana-gw/diana/server"
	"github.com/diana-gw/diana/shared/conf"
	"github.com/diana-gw/diana/shared/rules"
)

// The grammar of a rule and of dianad's document is stated once, by their decoders: each getter
// names its field, type, default and bounds, and conf.Describe records those calls. A schema is
// that record merged into its source in schema/src, which holds what a decoder cannot say: the
// prose (description, examples), the forms of strings (pattern, $ref to a $defs entry), defaults
// of lists and objects, and the rules that tie one field to another (allOf). A source that
// restates what the decoder states, describes a field the decoder does not read, or leaves a
// field it reads without a description, is an error.

// grammar is one generated schema: its source and the fields its decoder reads.
type grammar struct {
	file   string
	fields func() []conf.Field
}

var grammars = []grammar{
	{schema.RuleFile, func() []conf.Field { return conf.Describe(func(o *conf.Obj) { rules.ReadSpec(o) }) }},
	{schema.DianadFile, func() []conf.Field { return describeDianad(false) }},
	{schema.RulesFile, func() []conf.Field { return describeDianad(true) }},
}

func describeDianad(remote bool) []conf.Field {
	return conf.Describe(func(o *conf.Obj) { server.DecodeObj(o, remote) })
}

// generated is the keys a schema takes from its decoder, which its source may not state.
var generated = []string{"type", "enum", "minimum", "maximum", "required", "additionalProperties"}

// source is the path of g's source, from the module's root.
func (g grammar) source() string {
	return path.Join("schema", "src", strings.Replace(g.file, ".schema", "", 1))
}

// grammarSchema returns the schema of g: its source with the decoder's facts merged in.
func grammarSchema(g grammar) ([]byte, error) {
	b, err := os.ReadFile(g.source())
	if err != nil {
		return nil, err
	}
	return merged(g.source(), b, g.fields())
}

// merged returns the schema of the source b (named src) with fields merged in.
func merged(src string, b []byte, fields []conf.Field) ([]byte, error) {
	root, err := parseSource(src, b)
	if err != nil {
		return nil, err
	}
	m := &merge{root: root, src: src, done: map[*conf.Object]bool{}, reached: map[*conf.Object]bool{}}
	if d, ok := m.def("dimension"); ok {
		d.Set("type", "string")
		d.Set("pattern", dimensionPattern())
	}
	for _, f := range fields {
		m.field(f)
	}
	m.unreached(root, "")
	for _, e := range m.either {
		e.expand()
	}
	if len(m.errs) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(m.errs, "\n"))
	}
	order(root, false)
	var out bytes.Buffer
	writeJSON(&out, root, "")
	out.WriteByte('\n')
	return out.Bytes(), nil
}

// parseSource parses the source b (named src), which is a JSON object.
func parseSource(src string, b []byte) (*conf.Object, error) {
	v, err := conf.ParseJSON(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", src, err)
	}
	root, ok := v.(*conf.Object)
	if !ok {
		return nil, fmt.Errorf("%s: not an object", src)
	}
	return root, nil
}

type merge struct {
	root    *conf.Object
	src     string
	errs    []string
	done    map[*conf.Object]bool // nodes that took their facts
	either  []either              // fields that take one item or a list of them
	reached map[*conf.Object]bool // property nodes a field reached
}

// either is a field that takes one item or a list of them (a "strings" or "objects" field):
// its source states the item in "items", which becomes the oneOf of the item and the list once
// every field inside the item is merged.
type either struct {
	n       *conf.Object
	strings bool
}

func (e either) expand() {
	it, _ := e.n.Get("items")
	item, _ := it.(*conf.Object)
	if item == nil {
		item = &conf.Object{}
	}
	if e.strings && !has(item, "$ref") {
		item.Set("type", "string")
	}
	del(e.n, "items")
	e.n.Set("oneOf", []conf.Value{item, &conf.Object{Keys: []string{"type", "items"}, Vals: []conf.Value{"array", item}}})
}

func (m *merge) fail(format string, args ...any) {
	m.errs = append(m.errs, m.src+": "+fmt.Sprintf(format, args...))
}

func (m *merge) def(name string) (*conf.Object, bool) {
	defs, _ := m.root.Get("$defs")
	d, ok := defs.(*conf.Object)
	if !ok {
		return nil, false
	}
	n, ok := d.Get(name)
	o, isObj := n.(*conf.Object)
	return o, ok && isObj
}

// resolve follows a node's local $ref ("#/$defs/match", "#/$defs/match/properties/methods"); a
// $ref into another file ends the walk (nil): that file is generated from its own decoder.
func (m *merge) resolve(n *conf.Object) *conf.Object {
	for {
		r, ok := n.Get("$ref")
		ref, _ := r.(string)
		if !ok {
			return n
		}
		if !strings.HasPrefix(ref, "#/") {
			return nil
		}
		var cur conf.Value = m.root
		for _, p := range strings.Split(ref[2:], "/") {
			o, _ := cur.(*conf.Object)
			if o == nil {
				return nil
			}
			cur, _ = o.Get(p)
		}
		next, _ := cur.(*conf.Object)
		if next == nil {
			m.fail("%s: no such definition", ref)
			return nil
		}
		n = next
	}
}

// node returns the source's node of the field at path ("upstreams[].match.not[].paths"), its
// parent object (whose required list names it) and its key; nil where the walk leaves the file.
func (m *merge) node(path string) (n, parent *conf.Object, key string) {
	n = m.root
	if path == "" {
		return n, nil, ""
	}
	for _, part := range strings.Split(path, ".") {
		name, items := strings.CutSuffix(part, "[]")
		if n = m.resolve(n); n == nil {
			return nil, nil, ""
		}
		if part == "*" { // a value of an object_map: the source states it in additionalProperties
			ap, _ := n.Get("additionalProperties")
			if n, _ = ap.(*conf.Object); n == nil {
				m.fail("%s: an object of objects needs its values' additionalProperties here", path)
				return nil, nil, ""
			}
			m.reached[n] = true
			parent, key = nil, ""
			continue
		}
		props, _ := n.Get("properties")
		po, _ := props.(*conf.Object)
		if po == nil {
			po = &conf.Object{}
			n.Set("properties", po)
		}
		child, _ := po.Get(name)
		co, _ := child.(*conf.Object)
		if co == nil {
			m.fail("%s is read by the decoder but has no entry here", path)
			return nil, nil, ""
		}
		m.reached[co] = true
		parent, key, n = n, name, co
		if items {
			it, _ := co.Get("items")
			io, _ := it.(*conf.Object)
			if io == nil {
				m.fail("%s: a list needs its items here", path)
				return nil, nil, ""
			}
			parent, key, n = nil, "", io
		}
	}
	return n, parent, key
}

// field merges f, a field its decoder reads, into the source: its place in its parent's
// required list, its description's presence, its default and the facts of its type.
func (m *merge) field(f conf.Field) {
	n, parent, key := m.node(f.Path)
	if n == nil {
		return
	}
	if f.Required && parent != nil {
		if c, _ := n.Get("x-required"); c == "conditional" {
			del(n, "x-required") // required by an allOf of the source, when another field says so
		} else {
			required(parent, key)
		}
	}
	if f.Type == "duration" && has(n, "$ref") && !m.done[n] {
		m.fail("%s states $ref, which its decoder states (a duration)", f.Path)
		return
	}
	target := m.resolve(n)
	if target == nil {
		return // a field whose form is another file's
	}
	if f.Type != "" && !has(n, "description") && !has(target, "description") {
		m.fail("%s has no description", f.Path)
	}
	if f.Closed {
		target.Set("additionalProperties", false)
	}
	if f.Type == "" || m.done[target] {
		return
	}
	m.done[target] = true
	for _, k := range generated[:4] {
		if has(target, k) {
			m.fail("%s states %s, which its decoder states", f.Path, k)
		}
	}
	m.mergeDefault(f, n)
	m.typeFacts(f, target)
}

// mergeDefault states f's default on its node n, unless the source's x-default says why it has
// none.
func (m *merge) mergeDefault(f conf.Field, n *conf.Object) {
	if c, ok := n.Get("x-default"); ok {
		// computed: from another field's value, as its description says; absent: the field
		// is not given, which no value of its type says
		if c != "computed" && c != "absent" {
			m.fail("%s: x-default must be computed or absent, got %v", f.Path, c)
		}
		del(n, "x-default")
		return
	}
	if f.Default != nil && !f.Required {
		if has(n, "default") {
			m.fail("%s states default, which its decoder states", f.Path)
		}
		n.Set("default", jsonValue(f.Default))
	}
}

// typeFacts states on target what f's type says of its values.
func (m *merge) typeFacts(f conf.Field, target *conf.Object) {
	switch f.Type {
	case "string", "boolean", "integer":
		m.scalarFacts(f, target)
	case "duration":
		m.durationRef(f, target)
	case "object", "object_map":
		target.Set("type", "object")
	case "number":
		target.Set("type", "number")
		target.Set("minimum", conf.Number(strconv.FormatInt(f.Min, 10)))
		target.Set("maximum", conf.Number(strconv.FormatInt(f.Max, 10)))
	case "string_map":
		target.Set("type", "object")
		ap, _ := target.Get("additionalProperties")
		apo, _ := ap.(*conf.Object)
		if apo == nil {
			apo = &conf.Object{}
		}
		apo.Set("type", "string")
		target.Set("additionalProperties", apo)
	case "list":
		target.Set("type", "array")
	case "strings", "objects":
		if f.Pattern != "" { // each string's form: the item's
			m.itemPattern(f, target)
		}
		m.either = append(m.either, either{target, f.Type == "strings"})
	default:
		m.fail("%s: unknown type %s", f.Path, f.Type)
	}
}

// scalarFacts states the type, enum, pattern and bounds of a string, boolean or integer field
// on target, or on the alternative of its oneOf that states no type.
func (m *merge) scalarFacts(f conf.Field, target *conf.Object) {
	facts := target
	if alt := untyped(target); alt != nil { // the decoder also takes another form
		facts = alt
	}
	facts.Set("type", f.Type)
	if f.Enum != nil {
		l := make([]conf.Value, len(f.Enum))
		for i, e := range f.Enum {
			l[i] = e
		}
		facts.Set("enum", l)
	}
	if f.Pattern != "" { // a source may state the pattern of a string its decoder checks in code
		if has(facts, "pattern") {
			m.fail("%s states pattern, which its decoder states", f.Path)
		}
		facts.Set("pattern", f.Pattern)
	}
	if f.Type == "integer" {
		facts.Set("minimum", conf.Number(strconv.FormatInt(f.Min, 10)))
		facts.Set("maximum", conf.Number(strconv.FormatInt(f.Max, 10)))
	}
}

// durationRef points target at the definition of a duration, or of a positive one when f's
// minimum is above 0: this file's, else the rule schema's.
func (m *merge) durationRef(f conf.Field, target *conf.Object) {
	def := "duration"
	if f.Min > 0 {
		def = "positive_duration"
	}
	if _, local := m.def(def); local {
		target.Set("$ref", "#/$defs/"+def)
	} else {
		target.Set("$ref", schema.RuleFile+"#/$defs/"+def)
	}
}

// itemPattern states f's pattern on the items of target, a list of strings.
func (m *merge) itemPattern(f conf.Field, target *conf.Object) {
	it, _ := target.Get("items")
	item, _ := it.(*conf.Object)
	if item == nil {
		item = &conf.Object{}
		target.Set("items", item)
	}
	if has(item, "pattern") {
		m.fail("%s states its items' pattern, which its decoder states", f.Path)
	}
	item.Set("pattern", f.Pattern)
}

// unreached reports the properties of the source that no field of the decoder reached.
func (m *merge) unreached(n *conf.Object, path string) {
	props, _ := n.Get("properties")
	po, _ := props.(*conf.Object)
	if po == nil {
		return
	}
	for i, k := range po.Keys {
		c, _ := po.Vals[i].(*conf.Object)
		if c == nil {
			continue
		}
		p := strings.TrimPrefix(path+"."+k, ".")
		if !m.reached[c] {
			m.fail("%s is described here but its decoder does not read it", p)
		}
		m.unreached(c, p)
		if it, ok := c.Get("items"); ok {
			if io, ok := it.(*conf.Object); ok {
				m.unreached(io, p+"[]")
			}
		}
	}
}

// untyped returns the alternative of n's oneOf that states no type, for a field the decoder
// also reads in another form (reply.headers: a boolean or an enum).
func untyped(n *conf.Object) *conf.Object {
	v, _ := n.Get("oneOf")
	l, _ := v.([]conf.Value)
	for _, a := range l {
		if o, ok := a.(*conf.Object); ok && !has(o, "type") && !has(o, "$ref") {
			return o
		}
	}
	return nil
}

func required(parent *conf.Object, key string) {
	v, _ := parent.Get("required")
	l, _ := v.([]conf.Value)
	for _, k := range l {
		if k == key {
			return
		}
	}
	parent.Set("required", append(l, key))
}

func del(o *conf.Object, key string) {
	for i, k := range o.Keys {
		if k == key {
			o.Keys = append(o.Keys[:i:i], o.Keys[i+1:]...)
			o.Vals = append(o.Vals[:i:i], o.Vals[i+1:]...)
			return
		}
	}
}

func jsonString(s string) string {
	var b bytes.Buffer
	e := json.NewEncoder(&b)
	e.SetEscapeHTML(false)
	e.Encode(s)
	return strings.TrimSuffix(b.String(), "\n")
}

func has(o *conf.Object, key string) bool {
	_, ok := o.Get(key)
	return ok
}

func jsonValue(v any) conf.Value {
	switch v := v.(type) {
	case int64:
		return conf.Number(strconv.FormatInt(v, 10))
	case int:
		return conf.Number(strconv.Itoa(v))
	}
	return v
}

// dimensionPattern is the form of a "by" entry, from the dimensions' registry: NAME, or
// NAME:ARG for the kinds that take an argument (its form is the kind's Arg), required or
// optional as a rule with it decodes.
func dimensionPattern() string {
	optional := func(name string) bool {
		errs := &conf.Errors{}
		doc := &conf.Object{Keys: []string{"name", "by", "limit"}, Vals: []conf.Value{"r", name,
			&conf.Object{Keys: []string{"algorithm", "limit", "window"}, Vals: []conf.Value{"fixed_window", conf.Number("1"), "1s"}}}}
		rules.DecodeRule(conf.Read(doc, errs))
		return errs.Err() == nil
	}
	var alts []string
	for _, name := range rules.Dimensions() {
		k, _ := rules.DimensionNamed(name)
		switch {
		case k.Arg == "":
			alts = append(alts, regexp.QuoteMeta(name))
		case optional(name):
			alts = append(alts, regexp.QuoteMeta(name)+"(:"+k.Arg+")?")
		default:
			alts = append(alts, regexp.QuoteMeta(name)+":"+k.Arg)
		}
	}
	return "^(" + strings.Join(alts, "|") + ")$"
}

// keyOrder is the order of a schema node's keys in a generated file; others come after
// "default", in the source's order.
var keyOrder = []string{"$schema", "$id", "$ref", "title", "description", "type", "const", "enum", "pattern",
	"minimum", "maximum", "minLength", "minItems", "minProperties", "default"}

// order puts the keys of each schema node in keyOrder (not those of a map of names, such as
// properties).
func order(v conf.Value, names bool) {
	switch v := v.(type) {
	case *conf.Object:
		for i, k := range v.Keys {
			order(v.Vals[i], !names && (k == "properties" || k == "$defs"))
		}
		if names {
			return
		}
		rank := func(k string) int {
			for i, o := range keyOrder {
				if o == k {
					return i
				}
			}
			return len(keyOrder)
		}
		for i := 1; i < len(v.Keys); i++ {
			for j := i; j > 0 && rank(v.Keys[j]) < rank(v.Keys[j-1]); j-- {
				v.Keys[j], v.Keys[j-1] = v.Keys[j-1], v.Keys[j]
				v.Vals[j], v.Vals[j-1] = v.Vals[j-1], v.Vals[j]
			}
		}
	case []conf.Value:
		for _, e := range v {
			order(e, false)
		}
	}
}

// oneLine returns a small object of scalars on one line: {"$ref": "#/$defs/method"}.
func oneLine(o *conf.Object) (string, bool) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range o.Keys {
		switch o.Vals[i].(type) {
		case *conf.Object, []conf.Value:
			return "", false
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(jsonString(k) + ": ")
		writeJSON(&b, o.Vals[i], "")
	}
	b.WriteByte('}')
	return b.String(), true
}

// writeJSON writes v indented by two spaces, small objects and lists of scalars on one line.
func writeJSON(b *bytes.Buffer, v conf.Value, indent string) {
	switch v := v.(type) {
	case *conf.Object:
		if len(v.Keys) == 0 {
			b.WriteString("{}")
			return
		}
		if line, ok := oneLine(v); ok && len(indent)+len(line) < 100 {
			b.WriteString(line)
			return
		}
		b.WriteString("{\n")
		for i, k := range v.Keys {
			b.WriteString(indent + "  " + strconv.Quote(k) + ": ")
			writeJSON(b, v.Vals[i], indent+"  ")
			if i < len(v.Keys)-1 {
				b.WriteByte(',')
			}
			b.WriteByte('\n')
		}
		b.WriteString(indent + "}")
	case []conf.Value:
		flat := true
		for _, e := range v {
			switch e.(type) {
			case *conf.Object, []conf.Value:
				flat = false
			}
		}
		if flat {
			b.WriteByte('[')
			for i, e := range v {
				if i > 0 {
					b.WriteString(", ")
				}
				writeJSON(b, e, indent)
			}
			b.WriteByte(']')
			return
		}
		b.WriteString("[\n")
		for i, e := range v {
			b.WriteString(indent + "  ")
			writeJSON(b, e, indent+"  ")
			if i < len(v)-1 {
				b.WriteByte(',')
			}
			b.WriteByte('\n')
		}
		b.WriteString(indent + "]")
	case string:
		b.WriteString(jsonString(v))
	case conf.Number:
		b.WriteString(string(v))
	case bool:
		b.WriteString(strconv.FormatBool(v))
	case nil:
		b.WriteString("null")
	}
}
