package main

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// Konga (0.14.9, its last release) is not a package and its code stays out of the project: what
// its plugin form renders is stated once, as facts read in its source, in the table "What
// Konga's form renders" of docs/kong.md. This test reads that table and checks every field of
// the config record (what Konga reads, from Kong's GET /plugins/schema/diana) against it, so a
// schema change Konga could not render, or not send, fails here.

// kongaFeatures returns the table's rows: feature → renders ("yes" or "no").
func kongaFeatures(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile("../docs/kong.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "\n## What Konga's form renders\n")
	if !ok {
		t.Fatal(`docs/kong.md has no section "What Konga's form renders"`)
	}
	row := regexp.MustCompile("^\\| `([^`]+)` \\|[^|]*\\| (yes|no) \\|")
	m := map[string]string{}
	for _, l := range strings.Split(after, "\n") {
		if strings.HasPrefix(l, "## ") {
			break
		}
		if r := row.FindStringSubmatch(l); r != nil {
			m[r[1]] = r[2]
		}
	}
	if len(m) == 0 {
		t.Fatal("the Konga table of docs/kong.md has no rows")
	}
	return m
}

// kongaFeature is the table's name for the shape of a field: its type, with one_of, or with the
// type of its elements.
func kongaFeature(def map[string]any) string {
	typ, _ := def["type"].(string)
	switch {
	case def["one_of"] != nil:
		return typ + "+one_of"
	case typ == "array" || typ == "set":
		el, _ := def["elements"].(map[string]any)
		return typ + "<" + el["type"].(string) + ">"
	}
	return typ
}

// falsy reports whether Konga's create would drop v (it drops false, 0, "" and empty arrays,
// so that Kong fills the default in).
func falsy(v any) bool {
	switch v := v.(type) {
	case bool:
		return !v
	case float64:
		return v == 0
	case string:
		return v == ""
	case []any:
		return len(v) == 0
	}
	return v == nil
}

func TestKongaTable(t *testing.T) {
	rows := kongaFeatures(t)
	need := func(feature, field, why string) {
		t.Helper()
		switch rows[feature] {
		case "yes":
		case "":
			t.Errorf("%s: %s: the Konga table of docs/kong.md has no row `%s`", field, why, feature)
		default:
			t.Errorf("%s: %s: Konga cannot (`%s` is \"%s\" in docs/kong.md)", field, why, feature, rows[feature])
		}
	}
	var check func(prefix string, fields []kongSchemaField)
	check = func(prefix string, fields []kongSchemaField) {
		for _, f := range fields {
			name, def := prefix+f.name, f.def
			if strings.HasPrefix(f.name, "_") {
				need("_name", name, "a field whose name starts with _")
			}
			feature := kongaFeature(def)
			need(feature, name, "a field of type "+feature)
			if feature == "record" {
				var sub []kongSchemaField
				for _, raw := range def["fields"].([]any) {
					for n, d := range raw.(map[string]any) {
						sub = append(sub, kongSchemaField{n, d.(map[string]any)})
					}
				}
				for _, s := range sub {
					if s.def["type"] == "record" {
						need("record<record>", name+"."+s.name, "a record in a record")
					}
				}
				check(name+".", sub)
				continue
			}
			d, has := def["default"]
			if !has {
				continue
			}
			if arr, ok := d.([]any); ok && len(arr) > 0 {
				need("default<array>", name, "an array with a default other than []")
			}
			if !falsy(d) {
				// A value the operator may choose but Konga drops on create: Kong would store
				// the default instead.
				switch def["type"] {
				case "boolean":
					need("falsy", name, "a boolean that defaults to true (false could not be created)")
				case "integer", "number":
					if b, ok := def["between"].([]any); !ok || b[0].(float64) <= 0 && b[1].(float64) >= 0 {
						need("falsy", name, "a number that may be 0 but defaults to another value")
					}
				case "string":
					if def["len_min"] == 0.0 {
						need("falsy", name, `a string that may be "" but defaults to another value`)
					}
				}
			}
		}
	}
	s := dumpedSchema(t)
	check("", s.fields)
	// The rows the dump does not use still state Konga's facts; they must be answered.
	for _, f := range []string{"string+one_of", "string", "integer", "boolean", "array<string>", "default", "description", "map", "array<record>", "record", "record<record>", "foreign", "_name", "falsy", "default<array>"} {
		if rows[f] == "" {
			t.Errorf("the Konga table of docs/kong.md has no row `%s`", f)
		}
	}
}

// The per-IP step of docs/kong.md done in Konga stores the config that kong.yml states: Konga
// starts from each scalar's default (arrays empty), the operator sets three fields, Konga drops
// the falsy values, and Kong fills the defaults in.
func TestKongaPerIPStep(t *testing.T) {
	s := dumpedSchema(t)
	set := map[string]any{"algorithm": "fixed_window", "limit": 5.0, "window": "1h"}
	posted := map[string]any{}
	for _, f := range s.fields {
		v, ok := set[f.name]
		if !ok {
			v = f.def["default"]
			if f.def["type"] == "array" {
				v = []any{}
			}
		}
		if !falsy(v) {
			posted[f.name] = v
		}
	}
	fromKonga, err := s.kongValidate(posted)
	if err != nil {
		t.Fatalf("Konga posts %v, which Kong refuses: %v", posted, err)
	}
	for _, cfg := range dianaConfigs(t, docsKongYML(t)) {
		fromYML, err := s.kongValidate(clone(cfg))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(nonNull(fromKonga), nonNull(fromYML)) {
			t.Errorf("Konga stores %v, docs/kong.md's kong.yml %v", nonNull(fromKonga), nonNull(fromYML))
		}
	}
}
