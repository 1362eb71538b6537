package conf_test

import (
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/diana-gw/diana/shared/conf"
)

// read parses a JSON document and starts reading it.
func read(t *testing.T, doc string) (*conf.Obj, *conf.Errors) {
	t.Helper()
	v, err := conf.ParseJSON([]byte(doc))
	if err != nil {
		t.Fatalf("test document %s: %v", doc, err)
	}
	errs := &conf.Errors{Source: "test.json"}
	return conf.Read(v, errs), errs
}

// fieldErrors formats errs as "path: reason" lines, without the source.
func fieldErrors(errs *conf.Errors) []string {
	var out []string
	for _, f := range errs.List {
		out = append(out, f.Path+": "+f.Reason)
	}
	return out
}

func TestErrors(t *testing.T) {
	var errs conf.Errors
	if errs.Err() != nil {
		t.Fatalf("Err() of no errors = %v, want nil", errs.Err())
	}
	errs.Add("rules[0].limit.rate", "is required")
	errs.Add("", "must be an object, got a list")
	if got, want := errs.Err().Error(), "rules[0].limit.rate: is required\nmust be an object, got a list"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	errs.Source = "diana.json"
	want := "diana.json: rules[0].limit.rate: is required\ndiana.json: must be an object, got a list"
	if got := errs.Err().Error(); got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

// Each case reads one field of {"f": ...} with a getter and checks the value and the errors.
func TestGetters(t *testing.T) {
	str := func(o *conf.Obj) any { return o.String("f", "def") }
	enum := func(o *conf.Obj) any { return o.Enum("f", "a", "a", "b") }
	boolean := func(o *conf.Obj) any { return o.Bool("f", true) }
	integer := func(o *conf.Obj) any { return o.Int("f", 7, -5, 100) }
	dur := func(o *conf.Obj) any { return o.Duration("f", 5e6, 1e6, 3600e6) }
	strs := func(o *conf.Obj) any { return o.Strings("f") }
	smap := func(o *conf.Obj) any { k, v := o.StringMap("f"); return [2][]string{k, v} }

	tests := []struct {
		name   string
		get    func(*conf.Obj) any
		doc    string
		want   any
		errors []string // "path: reason substring"
	}{
		{"string", str, `{"f": "x"}`, "x", nil},
		{"string empty", str, `{"f": ""}`, "", nil},
		{"string absent", str, `{}`, "def", nil},
		{"string null", str, `{"f": null}`, "def", nil},
		{"string number", str, `{"f": 5}`, "def", []string{`f: must be a string, got the number 5`}},
		{"string list", str, `{"f": ["x"]}`, "def", []string{`f: must be a string, got a list`}},

		{"enum", enum, `{"f": "b"}`, "b", nil},
		{"enum absent", enum, `{}`, "a", nil},
		{"enum null", enum, `{"f": null}`, "a", nil},
		{"enum other", enum, `{"f": "c"}`, "a", []string{`f: must be one of a, b, got "c"`}},
		{"enum case", enum, `{"f": "B"}`, "a", []string{`f: must be one of a, b, got "B"`}},
		{"enum type", enum, `{"f": true}`, "a", []string{`f: must be a string, got a boolean`}},

		{"bool", boolean, `{"f": false}`, false, nil},
		{"bool absent", boolean, `{}`, true, nil},
		{"bool string", boolean, `{"f": "false"}`, true, []string{`f: must be true or false, got the string "false"`}},
		{"bool number", boolean, `{"f": 0}`, true, []string{`f: must be true or false, got the number 0`}},

		{"int", integer, `{"f": 42}`, int64(42), nil},
		{"int negative", integer, `{"f": -5}`, int64(-5), nil},
		{"int max", integer, `{"f": 100}`, int64(100), nil},
		{"int absent", integer, `{}`, int64(7), nil},
		{"int below", integer, `{"f": -6}`, int64(7), []string{`f: must be between -5 and 100, got -6`}},
		{"int above", integer, `{"f": 101}`, int64(7), []string{`f: must be between -5 and 100, got 101`}},
		{"int fraction", integer, `{"f": 1.5}`, int64(7), []string{`f: must be an integer between -5 and 100, got 1.5`}},
		{"int exponent", integer, `{"f": 1e2}`, int64(7), []string{`f: must be an integer between -5 and 100, got 1e2`}},
		{"int huge", integer, `{"f": 99999999999999999999999}`, int64(7), []string{`f: must be an integer between -5 and 100, got 99999999999999999999999`}},
		{"int string", integer, `{"f": "42"}`, int64(7), []string{`f: must be an integer, got the string "42"`}},

		{"duration", dur, `{"f": "1m30s"}`, int64(90e6), nil},
		{"duration absent", dur, `{}`, int64(5e6), nil},
		{"duration number", dur, `{"f": 10}`, int64(5e6), []string{`f: must be a duration with a unit such as "500ms", "1s" or "1m", got the number 10`}},
		{"duration no unit", dur, `{"f": "10"}`, int64(5e6), []string{`f: must be a duration such as "500ms", "1s", "1m30s" or "1d" (units y (365d), w, d, h, m, s, ms, us), got "10"`}},
		{"duration bad unit", dur, `{"f": "1x"}`, int64(5e6), []string{`f: must be a duration such as`}},
		{"duration empty", dur, `{"f": ""}`, int64(5e6), []string{`f: must be a duration such as`}},
		{"duration space", dur, `{"f": "5 s"}`, int64(5e6), []string{`f: must be a duration such as`}},
		{"duration below", dur, `{"f": "999ms"}`, int64(5e6), []string{`f: must be between 1s and 1h, got 999ms`}},
		{"duration above", dur, `{"f": "2h"}`, int64(5e6), []string{`f: must be between 1s and 1h, got 2h`}},
		{"duration overflow", dur, `{"f": "99999999999999999d"}`, int64(5e6), []string{`f: is too long: "99999999999999999d"`}},

		{"strings list", strs, `{"f": ["a", "b"]}`, []string{"a", "b"}, nil},
		{"strings one", strs, `{"f": "a"}`, []string{"a"}, nil},
		{"strings empty", strs, `{"f": []}`, []string{}, nil},
		{"strings absent", strs, `{}`, []string(nil), nil},
		{"strings number", strs, `{"f": 1}`, []string(nil), []string{`f: must be a list of strings, got the number 1`}},
		{"strings element", strs, `{"f": ["a", 2, "c", null]}`, []string{"a", "c"}, []string{`f[1]: must be a string, got the number 2`, `f[3]: must be a string, got null`}},

		{"string map", smap, `{"f": {"b": "1", "a": "2"}}`, [2][]string{{"b", "a"}, {"1", "2"}}, nil},
		{"string map list", smap, `{"f": ["a"]}`, [2][]string{}, []string{`f: must be an object of strings, got a list`}},
		{"string map value", smap, `{"f": {"a": 1, "b": "x"}}`, [2][]string{{"b"}, {"x"}}, []string{`f.a: must be a string, got the number 1`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, errs := read(t, tt.doc)
			got := tt.get(o)
			o.Done()
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %#v, want %#v", got, tt.want)
			}
			checkErrors(t, errs, tt.errors)
		})
	}
}

// checkErrors checks that errs holds exactly one error per entry of want, in order, each
// containing its entry ("path: reason", the reason possibly shortened).
func checkErrors(t *testing.T, errs *conf.Errors, want []string) {
	t.Helper()
	got := fieldErrors(errs)
	if len(got) != len(want) {
		t.Fatalf("errors:\n%s\nwant %d: %q", strings.Join(got, "\n"), len(want), want)
	}
	for i, w := range want {
		if !strings.HasPrefix(got[i], w[:strings.Index(w, ": ")+2]) || !strings.Contains(got[i], w) {
			t.Errorf("error %d = %q, want %q", i, got[i], w)
		}
	}
}

func TestNestedObjects(t *testing.T) {
	o, errs := read(t, `{
		"a": {"b": {"c": 1, "typo": 2}},
		"list": [{"x": "1"}, 5, null, {"y": true}],
		"notlist": {"x": 1},
		"notobj": [1]
	}`)
	b := o.Obj("a").Obj("b")
	if got := b.Int("c", 0, 0, 10); got != 1 {
		t.Errorf("a.b.c = %d, want 1", got)
	}
	if got := b.Path("c"); got != "a.b.c" {
		t.Errorf("Path = %q, want a.b.c", got)
	}
	b.Done()
	list := o.List("list")
	if len(list) != 4 {
		t.Fatalf("List gave %d objects, want 4", len(list))
	}
	for _, e := range list {
		e.Require("x")
		e.String("x", "")
		e.Done()
	}
	if got := o.List("notlist"); got != nil {
		t.Errorf("List of an object = %v, want nil", got)
	}
	n := o.Obj("notobj")
	n.Require("k") // adds nothing: the value is not an object, which is reported once
	if got := n.Int("k", 3, 0, 10); got != 3 {
		t.Errorf("field of a non-object = %d, want the default 3", got)
	}
	n.Done()
	absent := o.Obj("absent") // reads as empty: the defaults apply
	if got := absent.String("s", "def"); got != "def" {
		t.Errorf("field of an absent object = %q, want def", got)
	}
	absent.Require("s")
	absent.Done()
	o.Done()
	checkErrors(t, errs, []string{
		`a.b.typo: unknown field`,
		`list[1]: must be an object, got the number 5`,
		`list[2]: must be an object, got null`,
		`list[3].x: is required`,
		`list[3].y: unknown field`,
		`notlist: must be a list, got an object`,
		`notobj: must be an object, got a list`,
		`absent.s: is required`,
	})
}

func TestRequireAndDone(t *testing.T) {
	o, errs := read(t, `{"z": 1, "present": "x", "null": null, "a": 2, "empty": ""}`)
	o.Require("present", "null", "missing", "empty")
	if !o.Has("null") || o.Has("missing") {
		t.Errorf("Has(null) = %v, Has(missing) = %v; want true, false", o.Has("null"), o.Has("missing"))
	}
	o.String("present", "")
	o.String("null", "")
	o.String("empty", "")
	o.Fail("present", "is wrong in some way")
	o.Done()
	if o.Errors() != errs {
		t.Errorf("Errors() is not the document's errors")
	}
	// Unknown fields come in document order, after the errors recorded before Done.
	checkErrors(t, errs, []string{
		`null: is required`,
		`missing: is required`,
		`present: is wrong in some way`,
		`z: unknown field`,
		`a: unknown field`,
	})
}

func TestReadRootNotObject(t *testing.T) {
	for doc, want := range map[string]string{
		`[]`:   `: must be an object, got a list`,
		`"x"`:  `: must be an object, got the string "x"`,
		`true`: `: must be an object, got a boolean`,
	} {
		o, errs := read(t, doc)
		o.Require("version")
		o.Done()
		if got := fieldErrors(errs); len(got) != 1 || got[0] != want {
			t.Errorf("%s: errors %q, want [%q]", doc, got, want)
		}
	}
	// A null document is an empty one.
	errs := &conf.Errors{}
	o := conf.Read(nil, errs)
	o.Require("version")
	if got := fieldErrors(errs); len(got) != 1 || got[0] != "version: is required" {
		t.Errorf("null document: errors %q", got)
	}
}

// Matching and StringsMatching refuse a string not of their form, naming it, and nothing else.
func TestMatching(t *testing.T) {
	port, name := regexp.MustCompile(`^:[0-9]+$`), regexp.MustCompile(`^[a-z]+$`)
	for _, c := range []struct {
		doc    string
		listen string
		want   []string
	}{
		{`{}`, ":80", nil},
		{`{"listen": ":8080", "hosts": ["a", "b"]}`, ":8080", nil},
		{`{"hosts": "a"}`, ":80", nil},
		{`{"listen": "8080"}`, "8080", []string{`listen: must be a port, got "8080"`}},
		{`{"listen": 8080}`, ":80", []string{"listen: must be a string, got the number 8080"}},
		{`{"hosts": ["a", "B", "C"]}`, ":80", []string{`hosts: each must be a name, got "B"`}},
	} {
		o, errs := read(t, c.doc)
		if got := o.Matching("listen", ":80", port, "a port"); got != c.listen {
			t.Errorf("%s: listen %q, want %q", c.doc, got, c.listen)
		}
		o.StringsMatching("hosts", name, "a name")
		if got := fieldErrors(errs); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: errors %q, want %q", c.doc, got, c.want)
		}
	}
}
