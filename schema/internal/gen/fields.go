package main

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"strings"

	"github.com/diana-gw/diana/shared/conf"
)

// A field table of the docs lists the fields of one object of a config document, one row
// each, in the order its reader reads them: the field, its type, its default and its meaning.
// The field, the type and the default come from the reader (conf.Describe) and its source in
// schema/src (the defaults of lists and objects); the meaning is the docs' own prose, kept from
// the table as it is, since it says more than the schema's descriptions (links, examples,
// Markdown), which start the row of a field the table lacks. Where neither the reader nor the
// source states a default (a required field the source says is required only sometimes, an
// x-default of "computed" or "absent", an object that is absent unless given), the table's own
// cell is kept too. A table whose fields all lack a default has no default column.
type fieldTable struct {
	g    grammar
	path string // the object's path in g's document: "" (the document), "admin", "upstreams[]"
}

// configurationTables are the field tables of docs/configuration.md: dianad's document
// (grammars[1]), then a rule's (grammars[0]).
var configurationTables = []fieldTable{
	{grammars[1], ""},
	{grammars[1], "admin"},
	{grammars[1], "connections"},
	{grammars[1], "local_store"},
	{grammars[1], "upstreams[]"},
	{grammars[1], "redis"},
	{grammars[1], "rls"},
	{grammars[1], "rls.quota"},
	{grammars[1], "remote"},
	{grammars[0], ""},
	{grammars[0], "match"},
	{grammars[0], "reply"},
	{grammars[0], "batch"},
	{grammars[0], "usage"},
}

// section is the name of t's markers: "fields of dianad.admin", "fields of rule".
func (t fieldTable) section() string {
	s := "fields of " + strings.TrimSuffix(t.g.file, ".schema.json")
	if t.path != "" {
		s += "." + t.path
	}
	return s
}

// row is one field of a table.
type row struct {
	name, typ, def, meaning string
	stated                  bool // the reader or the source states def
}

// render returns t's table, given the one the page holds now (old).
func (t fieldTable) render(old string) (string, error) {
	src, err := t.g.sourceTree()
	if err != nil {
		return "", err
	}
	kept := cells(old)
	var rows []row
	defaults := false
	for _, f := range t.g.fields() {
		name, ok := strings.CutPrefix(f.Path, t.path+".")
		if t.path == "" {
			name, ok = f.Path, true
		}
		if !ok || f.Type == "" || strings.ContainsAny(name, ".[*") {
			continue // not a field of this object
		}
		n, _, _ := src.node(f.Path)
		if n == nil {
			return "", errors.New(strings.Join(src.errs, "\n"))
		}
		r := row{name: name, typ: typeOf(f, n)}
		r.def, r.stated = defaultOf(f, n)
		old := kept[name]
		if !r.stated && len(old) == 4 {
			r.def = old[2]
		} else if !r.stated {
			r.def = unstated(f, n)
		}
		defaults = defaults || r.stated || len(old) == 4
		if len(old) >= 3 {
			r.meaning = old[len(old)-1]
		} else {
			r.meaning = describe(n, src)
		}
		rows = append(rows, r)
	}
	if len(rows) == 0 {
		return "", errors.New(t.section() + ": its reader reads no such object")
	}
	var b strings.Builder
	if defaults {
		b.WriteString("| field | type | default | meaning |\n| --- | --- | --- | --- |\n")
	} else {
		b.WriteString("| field | type | meaning |\n| --- | --- | --- |\n")
	}
	for _, r := range rows {
		b.WriteString("| `" + r.name + "` | " + r.typ + " | ")
		if defaults {
			b.WriteString(r.def + " | ")
		}
		b.WriteString(r.meaning + " |\n")
	}
	return b.String(), nil
}

// sourceTree returns g's source, parsed, to look its fields' nodes up.
func (g grammar) sourceTree() (*merge, error) {
	b, err := os.ReadFile(g.source())
	if err != nil {
		return nil, err
	}
	root, err := parseSource(g.source(), b)
	if err != nil {
		return nil, err
	}
	return &merge{root: root, src: g.source(), reached: map[*conf.Object]bool{}}, nil
}

// typeOf is the type of f as the docs write it.
func typeOf(f conf.Field, n *conf.Object) string {
	switch {
	case f.Enum != nil:
		return "`" + strings.Join(f.Enum, "`, `") + "`"
	case has(n, "const"):
		return f.Type // its one value is in the meaning
	}
	switch f.Type {
	case "integer":
		return "integer, " + number(f.Min) + "–" + number(f.Max)
	case "number":
		return "decimal, " + number(f.Min) + "–" + number(f.Max)
	case "duration":
		return "duration, " + conf.FormatDuration(f.Min) + "–" + conf.FormatDuration(f.Max)
	case "strings":
		return "list of strings"
	case "string_map":
		return "map of name → string"
	case "list":
		return "list of objects"
	case "objects":
		return "object or list of objects"
	case "object_map":
		return "map of name → object"
	}
	return f.Type // string, boolean, object
}

// defaultOf is the default of f as the docs write it, and whether the reader or the source
// states one.
func defaultOf(f conf.Field, n *conf.Object) (string, bool) {
	if _, ok := n.Get("x-default"); ok {
		return "", false
	}
	if x, _ := n.Get("x-required"); f.Required && x == nil {
		return "required", true
	}
	if f.Required {
		return "", false
	}
	if d, ok := n.Get("default"); ok { // a list's or an object's, which the source states
		var b bytes.Buffer
		writeJSON(&b, d, "") // one line: a default is small
		return "`" + b.String() + "`", true
	}
	switch d := f.Default.(type) {
	case string:
		if f.Enum != nil { // written as its type lists it
			return "`" + d + "`", true
		}
		return "`" + jsonString(d) + "`", true
	case bool:
		return "`" + strconv.FormatBool(d) + "`", true
	case int64:
		return "`" + strconv.FormatInt(d, 10) + "`", true
	}
	return "", false
}

// unstated is the default cell of a new row whose default neither the reader nor the source
// states, until the table says more.
func unstated(f conf.Field, n *conf.Object) string {
	switch x, _ := n.Get("x-default"); {
	case f.Required:
		return "required (see meaning)"
	case x == "computed":
		return "computed (see meaning)"
	}
	return "none"
}

// describe is the source's description of node n, for a row the table lacks.
func describe(n *conf.Object, src *merge) string {
	d, ok := n.Get("description")
	if !ok {
		if t := src.resolve(n); t != nil {
			d, _ = t.Get("description")
		}
	}
	s, _ := d.(string)
	return strings.ReplaceAll(s, "|", `\|`)
}

// cells returns the rows of a Markdown table by their first cell's field name (`name`), each
// split into its cells.
func cells(table string) map[string][]string {
	rows := map[string][]string{}
	for _, line := range strings.Split(table, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		var cs []string
		cell := ""
		for i := 1; i < len(line); i++ {
			switch {
			case line[i] == '\\' && i+1 < len(line):
				cell += line[i : i+2]
				i++
			case line[i] == '|':
				cs = append(cs, strings.TrimSpace(cell))
				cell = ""
			default:
				cell += line[i : i+1]
			}
		}
		if len(cs) > 0 {
			rows[strings.Trim(cs[0], "`")] = cs
		}
	}
	return rows
}
