package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/diana-gw/diana/internal/costtest"
	"github.com/diana-gw/diana/shared/conf"
)

// show renders a tree compactly: strings quoted, numbers bare, objects in key order.
func show(v conf.Value) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(v)
	case conf.Number:
		return string(v)
	case string:
		return strconv.Quote(v)
	case []conf.Value:
		parts := make([]string, len(v))
		for i, x := range v {
			parts[i] = show(x)
		}
		return "[" + strings.Join(parts, ",") + "]"
	case *conf.Object:
		parts := make([]string, len(v.Keys))
		for i, k := range v.Keys {
			parts[i] = k + ":" + show(v.Vals[i])
		}
		return "{" + strings.Join(parts, ",") + "}"
	}
	return "?"
}

func TestDecodeValid(t *testing.T) {
	tests := []struct {
		name, doc, want string
	}{
		// YAML
		{"c.yaml", "version: 1\nname: x\n", `{version:1,name:"x"}`},
		{"c.yml", "b: 2\na: 1\n", `{b:2,a:1}`},
		{"c.yaml", "a: [1, -2.5, 3e4, 0, -0, 1.5E-3]", `{a:[1,-2.5,3e4,0,-0,1.5E-3]}`},
		{"c.yaml", "a: 123456789012345678901234567890", `{a:123456789012345678901234567890}`},
		{"c.yaml", "a: true\nb: False\nc: TRUE\nd: yes\ne: on", `{a:true,b:false,c:true,d:"yes",e:"on"}`},
		{"c.yaml", "a: ~\nb: null\nc:\nd: Null", `{a:null,b:null,c:null,d:null}`},
		{"c.yaml", `a: "1"` + "\nb: '2'\nc: !!str 3\nd: \"true\"", `{a:"1",b:"2",c:"3",d:"true"}`},
		{"c.yaml", "a: 2024-01-02\nb: 10:30", `{a:"2024-01-02",b:"10:30"}`},
		{"c.yaml", "a: |\n  x\n  y\nb: >\n  x\n  y\n", `{a:"x\ny\n",b:"x y\n"}`},
		{"c.yaml", "- a\n- - b\n  - {c: d}\n", `["a",["b",{c:"d"}]]`},
		{"c.yaml", "a: []\nb: {}", `{a:[],b:{}}`},
		{"c.yaml", "1: a\ntrue: b", `{1:"a",true:"b"}`},
		{"c.yaml", "# comment\n---\na: 1 # trailing\n...\n", `{a:1}`},
		{"c.yaml", "x", `"x"`},
		{"c.yaml", "a: !!float 1\nb: !!int 2", `{a:1,b:2}`},
		// Aliases and merge keys.
		{"c.yaml", "a: &x {p: 1}\nb: *x\nc: [*x, *x]", `{a:{p:1},b:{p:1},c:[{p:1},{p:1}]}`},
		{"c.yaml", "k: &k name\n*k : v", `{k:"name",name:"v"}`},
		{"c.yaml", "base: &b {p: 1, q: 2}\nr:\n  <<: *b\n  q: 3\n  s: 4", `{base:{p:1,q:2},r:{p:1,q:3,s:4}}`},
		{"c.yaml", "a: &a {p: 1, q: 1}\nb: &b {q: 2, r: 2}\nc: {s: 3, <<: [*a, *b]}", `{a:{p:1,q:1},b:{q:2,r:2},c:{s:3,p:1,q:1,r:2}}`},
		{"c.yaml", `c: {"<<": 1}`, `{c:{<<:1}}`},
		// JSON, by extension and by sniffing.
		{"c.json", `{"version": 1, "name": "x", "l": [true, null, 1.5]}`, `{version:1,name:"x",l:[true,null,1.5]}`},
		{"redis diana:config", "  \n{\"a\": 1}", `{a:1}`},
		{"http https://cfg/x.json?v=2", `{"a": 1}`, `{a:1}`},
		{"http https://cfg/x.yaml#f", "a: 1", `{a:1}`},
		{"redis diana:config", "a: 1", `{a:1}`},
		// A YAML-named document is YAML even if it starts with "{" (a flow mapping).
		{"c.yaml", "{a: 1, b: [x]}", `{a:1,b:["x"]}`},
	}
	for _, tt := range tests {
		v, err := Decode([]byte(tt.doc), tt.name)
		if err != nil {
			t.Errorf("Decode(%q, %q): %v", tt.doc, tt.name, err)
			continue
		}
		if got := show(v); got != tt.want {
			t.Errorf("Decode(%q, %q) = %s, want %s", tt.doc, tt.name, got, tt.want)
		}
	}
}

func TestDecodeErrors(t *testing.T) {
	tests := []struct {
		name, doc, want string
	}{
		{"c.yaml", "", "c.yaml: empty document"},
		{"c.json", " \n\t", "c.json: empty document"},
		{"c.yaml", "# only a comment\n", "c.yaml: empty document"},
		{"c.yaml", "---\n", "c.yaml: empty document"},
		{"c.yaml", "a: 1\n---\nb: 2\n", "c.yaml: line 2: a second document starts here (a config file holds one document)"},
		{"c.yaml", "a: 1\nb: 2\na: 3\n", `c.yaml: line 3: duplicate key "a" (first at line 1)`},
		{"c.yaml", "x:\n  - {k: 1, k: 2}\n", `c.yaml: line 2: duplicate key "k" (first at line 2)`},
		{"c.yaml", "a: &a {p: 1}\nb:\n  <<: *a\n  <<: *a\n", "c.yaml: line 4: duplicate key << (first at line 3)"},
		{"c.yaml", "? [a, b]\n: c\n", "c.yaml: line 1: a mapping key must be a scalar, not a sequence"},
		{"c.yaml", "? {a: b}\n: c\n", "c.yaml: line 1: a mapping key must be a scalar, not a mapping"},
		{"c.yaml", "a: 0x1F", "c.yaml: line 1: number 0x1F must be written in plain decimal (YAML reads it as 31)"},
		{"c.yaml", "a: 0o17", "c.yaml: line 1: number 0o17 must be written in plain decimal (YAML reads it as 15)"},
		{"c.yaml", "a: 010", "c.yaml: line 1: number 010 must be written in plain decimal (YAML reads it as 8)"},
		{"c.yaml", "a: 1_000", "c.yaml: line 1: number 1_000 must be written in plain decimal (YAML reads it as 1000)"},
		{"c.yaml", "a: +5", "c.yaml: line 1: number +5 must be written in plain decimal (YAML reads it as 5)"},
		{"c.yaml", "a:\n  b: .5", "c.yaml: line 2: number .5 must be written in plain decimal (YAML reads it as 0.5)"},
		{"c.yaml", "a: 5.", "c.yaml: line 1: number 5. must be written in plain decimal (YAML reads it as 5)"},
		{"c.yaml", "a: .inf", "c.yaml: line 1: number .inf is not allowed: numbers must be finite"},
		{"c.yaml", "a: -.Inf", "c.yaml: line 1: number -.Inf is not allowed: numbers must be finite"},
		{"c.yaml", "a: .NaN", "c.yaml: line 1: number .NaN is not allowed: numbers must be finite"},
		{"c.yaml", "a: !!int x", `c.yaml: line 1: invalid number "x"`},
		{"c.yaml", "a: !!bool x", `c.yaml: line 1: invalid boolean "x"`},
		{"c.yaml", "a: !!binary aGk=", "c.yaml: line 1: unsupported tag !!binary"},
		{"c.yaml", "a: !custom x", "c.yaml: line 1: unsupported tag !custom"},
		{"c.yaml", "a: !!str {b: 1}", "c.yaml: line 1: unsupported tag !!str on a mapping"},
		{"c.yaml", "a: !!map [1]", "c.yaml: line 1: unsupported tag !!map on a sequence"},
		{"c.yaml", "a: *nope", "c.yaml: unknown anchor 'nope' referenced"},
		{"c.yaml", "a: &x [1, *x]", "c.yaml: line 1: alias *x is used inside its own anchor"},
		{"c.yaml", "a: &x {b: {c: *x}}", "c.yaml: line 1: alias *x is used inside its own anchor"},
		{"c.yaml", "a: &x {<<: *x}", "c.yaml: line 1: alias *x is used inside its own anchor"},
		{"c.yaml", "a: {<<: 1}", "c.yaml: line 1: << takes a mapping or a list of mappings"},
		{"c.yaml", "a: {<<: [1]}", "c.yaml: line 1: << takes a mapping or a list of mappings, and this list holds something else"},
		{"c.yaml", "a: 1\n b: 2\n", "c.yaml: line 2: mapping values are not allowed in this context"},
		{"c.yaml", "a:\n\t- 1\n", "c.yaml: line 2: found character that cannot start any token"},
		{"c.yaml", "a: [1, 2\n", "c.yaml: line 1: did not find expected ',' or ']'"},
		{"c.json", `{"a": 1, "a": 2}`, `c.json: line 1, column 10: duplicate key "a"`},
		{"c.json", "{\"a\": 1,\n}", `c.json: line 2, column 1: unexpected "}" (expected a string key; trailing commas are not allowed)`},
		{"c.json", "a: 1", `c.json: line 1, column 1: unexpected "a" (expected a value)`},
		{"other", `{"a": 0x1F}`, `other: line 1, column 7: invalid number "0x1F"`},
	}
	for _, tt := range tests {
		v, err := Decode([]byte(tt.doc), tt.name)
		if err == nil {
			t.Errorf("Decode(%q, %q) = %s, want error %q", tt.doc, tt.name, show(v), tt.want)
			continue
		}
		if err.Error() != tt.want {
			t.Errorf("Decode(%q, %q) error:\n got %q\nwant %q", tt.doc, tt.name, err, tt.want)
		}
	}
}

func TestDecodeJSONErrorIsSyntaxError(t *testing.T) {
	_, err := Decode([]byte(`{"a": }`), "c.json")
	var se *conf.SyntaxError
	if !errors.As(err, &se) || se.Line != 1 || se.Col != 7 {
		t.Fatalf("error %v: want a *conf.SyntaxError at line 1, column 7", err)
	}
}

// A "billion laughs" document: each level doubles ten times; expanding it fully would make
// 10^9 values.
func TestDecodeAliasBomb(t *testing.T) {
	doc := "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
	prev := "a"
	for _, name := range []string{"b", "c", "d", "e", "f", "g", "h", "i"} {
		doc += name + ": &" + name + " [" + strings.Repeat("*"+prev+", ", 9) + "*" + prev + "]\n"
		prev = name
	}
	_, err := Decode([]byte(doc), "bomb.yaml")
	if err == nil || !strings.Contains(err.Error(), "aliases expand the document to more than") {
		t.Fatalf("error %v: want the alias expansion limit", err)
	}
	// The same shape, small enough, is fine.
	v, err := Decode([]byte("a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]\n"), "ok.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := show(v), `{a:["x","x"],b:[["x","x"],["x","x"]],c:[[["x","x"],["x","x"]],[["x","x"],["x","x"]]]}`; got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}

// Alias bombs are refused, and decoding one costs memory in proportion to its size: the
// harness measures the bytes allocated. Wave 1 expanded the 2 MB document of nested aliases to
// 3.43 GB in 12 s; one 1 MB string aliased 500 times cost dianad validate 2.1 GB in 20 s, in the
// errors quoting it, before aliases were bounded by their text too.
func TestDecodeLargeAliasBombs(t *testing.T) {
	var nested strings.Builder
	nested.WriteString("a: &a [" + strings.Repeat("x, ", 999) + "x]\n")
	for i := 0; nested.Len() < 2<<20; i++ {
		fmt.Fprintf(&nested, "k%d: &k%d [*a, *a, *a, *a, *a, *a, *a, *a]\n", i, i)
	}
	for _, c := range []struct {
		name, doc, want string
	}{
		{"nested lists", nested.String(), "values (its own and 100000 more)"},
		{"one string", "s: &s " + strings.Repeat("x", 1<<20) + "\nl: [" + strings.Repeat("*s, ", 499) + "*s]\n",
			"bytes of keys and strings (its own and 1048576 more)"},
		{"one key", "k: &k " + strings.Repeat("x", 1<<20) + "\nl: [" + strings.Repeat("{*k : 1}, ", 499) + "{*k : 1}]\n",
			"bytes of keys and strings"},
	} {
		doc := []byte(c.doc)
		var err error
		costtest.Check(t, fmt.Sprintf("%s (%d bytes)", c.name, len(doc)), uint64(100*len(doc)+10<<20), time.Minute, func() {
			_, err = Decode(doc, "bomb.yaml")
		})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
	}
}

// A document may alias a string as often as the text budget allows: the bound is the text
// produced, not the number of aliases.
func TestDecodeAliasText(t *testing.T) {
	s := strings.Repeat("x", 1000)
	for _, c := range []struct {
		copies int
		ok     bool
	}{{1, true}, {1048, true}, {1049, false}} { // 1002 bytes written, 1048576 more allowed
		doc := "s: &s " + s + "\nl: [" + strings.Repeat("*s, ", c.copies-1) + "*s]\n"
		_, err := Decode([]byte(doc), "t.yaml")
		if (err == nil) != c.ok {
			t.Errorf("%d aliases of %d bytes: error %v, want ok %v", c.copies, len(s), err, c.ok)
		}
	}
}
