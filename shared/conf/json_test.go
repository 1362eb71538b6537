package conf

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
)

// obj builds an *Object from alternating keys and values.
func obj(kv ...Value) *Object {
	o := &Object{}
	for i := 0; i < len(kv); i += 2 {
		o.Keys = append(o.Keys, kv[i].(string))
		o.Vals = append(o.Vals, kv[i+1])
	}
	return o
}

func arr(vs ...Value) []Value {
	if vs == nil {
		return []Value{}
	}
	return vs
}

// render writes a tree in a notation that keeps every distinction ParseJSON makes (the type of
// each node, key order, a number's exact text), so two trees are equal when they render the
// same, and a mismatch shows where.
func render(v Value) string {
	var b strings.Builder
	var walk func(Value)
	walk = func(v Value) {
		switch v := v.(type) {
		case nil:
			b.WriteString("null")
		case bool:
			b.WriteString(strconv.FormatBool(v))
		case Number:
			b.WriteString("N(" + string(v) + ")")
		case string:
			b.WriteString(strconv.Quote(v))
		case []Value:
			if v == nil {
				b.WriteString("nil-array")
				return
			}
			b.WriteString("[")
			for i, e := range v {
				if i > 0 {
					b.WriteString(",")
				}
				walk(e)
			}
			b.WriteString("]")
		case *Object:
			if len(v.Keys) != len(v.Vals) {
				b.WriteString("BAD-OBJECT")
				return
			}
			b.WriteString("{")
			for i, k := range v.Keys {
				if i > 0 {
					b.WriteString(",")
				}
				b.WriteString(strconv.Quote(k) + ":")
				walk(v.Vals[i])
			}
			b.WriteString("}")
		default:
			b.WriteString("UNEXPECTED-TYPE")
		}
	}
	walk(v)
	return b.String()
}

func nest(open, close string, n int) string {
	return strings.Repeat(open, n) + strings.Repeat(close, n)
}

var validJSON = []struct {
	name string
	in   string
	want Value
}{
	{"null", "null", nil},
	{"true", "true", true},
	{"false", " false ", false},
	{"zero", "0", Number("0")},
	{"negative zero", "-0", Number("-0")},
	{"integer", "12345", Number("12345")},
	{"number text kept", "1.50E+02", Number("1.50E+02")},
	{"fraction", "-0.25", Number("-0.25")},
	{"exponent", "1e-7", Number("1e-7")},
	{"huge number kept as text", "1e400", Number("1e400")},
	{"long integer kept as text", "123456789012345678901234567890", Number("123456789012345678901234567890")},
	{"empty string", `""`, ""},
	{"plain string", `"rate"`, "rate"},
	{"utf-8 string", `"héllo ✓ 😀"`, "héllo ✓ 😀"},
	{"simple escapes", `"\" \\ \/ \b \f \n \r \t"`, "\" \\ / \b \f \n \r \t"},
	{"unicode escape", `"\u00e9\u2713"`, "é✓"},
	{"unicode escape upper hex", `"\u00E9"`, "é"},
	{"escaped NUL", `"a\u0000b"`, "a\x00b"},
	{"surrogate pair", `"\ud83d\ude00"`, "😀"},
	{"lone high surrogate", `"\ud83dx"`, "\uFFFDx"},
	{"lone low surrogate", `"\ude00"`, "\uFFFD"},
	{"high then high then low", `"\ud83d\ud83d\ude00"`, "\uFFFD😀"},
	{"high then non-surrogate escape", `"\ud83d\u0041"`, "\uFFFDA"},
	{"high at end", `"\ud83d"`, "\uFFFD"},
	{"escape after plain text", `"ab\ncd"`, "ab\ncd"},
	{"literal U+FFFD", "\"\uFFFD\"", "\uFFFD"},
	{"DEL is not a control character", "\"\x7f\"", "\x7f"},
	{"empty array", "[]", arr()},
	{"empty array with space", "[ \n ]", arr()},
	{"empty object", "{}", obj()},
	{"empty object with space", "{\t}", obj()},
	{"array", `[1, "a", true, null, [], {}]`, arr(Number("1"), "a", true, nil, arr(), obj())},
	{"object keeps key order", `{"z": 1, "a": 2, "m": 3}`, obj("z", Number("1"), "a", Number("2"), "m", Number("3"))},
	{"nested", `{"rules": [{"rate": 10, "burst": 2.5}], "on": false}`,
		obj("rules", arr(obj("rate", Number("10"), "burst", Number("2.5"))), "on", false)},
	{"keys differ by escape only", `{"a": 1, "\u0062": 2}`, obj("a", Number("1"), "b", Number("2"))},
	{"empty key", `{"": 1}`, obj("", Number("1"))},
	{"all whitespace kinds", " \t\r\n[ 1 ,\r\n2 ] \n", arr(Number("1"), Number("2"))},
	{"depth 64", nest("[", "]", 64), func() Value {
		var v Value = arr()
		for i := 1; i < 64; i++ {
			v = arr(v)
		}
		return v
	}()},
	{"many keys", manyKeys(40, false), func() Value {
		o := &Object{}
		for i := 0; i < 40; i++ {
			o.Keys = append(o.Keys, "k"+strconv.Itoa(i))
			o.Vals = append(o.Vals, Number(strconv.Itoa(i)))
		}
		return o
	}()},
}

// manyKeys returns an object with n keys "k0".."k<n-1>", repeating "k3" at the end if dup.
func manyKeys(n int, dup bool) string {
	var b strings.Builder
	b.WriteString("{")
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(`"k` + strconv.Itoa(i) + `":` + strconv.Itoa(i))
	}
	if dup {
		b.WriteString(`,"k3":0`)
	}
	b.WriteString("}")
	return b.String()
}

func TestParseJSONValid(t *testing.T) {
	for _, tc := range validJSON {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseJSON([]byte(tc.in))
			if err != nil {
				t.Fatalf("ParseJSON(%q): %v", tc.in, err)
			}
			if g, w := render(got), render(tc.want); g != w {
				t.Errorf("ParseJSON(%q)\n got %s\nwant %s", tc.in, g, w)
			}
		})
	}
}

var invalidJSON = []struct {
	name      string
	in        string
	msg       string // substring of the message
	line, col int
}{
	{"empty", "", "empty document", 1, 1},
	{"only whitespace", " \n ", "empty document", 2, 2},
	{"close brace as value", `{"a": }`, `unexpected "}" (expected a value)`, 1, 7},
	{"missing value at end", `{"a":`, `unexpected end of input (expected a value)`, 1, 6},
	{"duplicate key", "{\n  \"rate\": 1,\n  \"rate\": 2\n}", `duplicate key "rate"`, 3, 3},
	{"duplicate key in nested object", `[{"a": {"b": 1, "b": 2}}]`, `duplicate key "b"`, 1, 17},
	{"duplicate key via escape", `{"a": 1, "\u0061": 2}`, `duplicate key "a"`, 1, 10},
	{"duplicate key in large object", manyKeys(40, true), `duplicate key "k3"`, 1, 342},      // 1 + 10*6 + 30*8 + 40 commas = 341 bytes before the key,
	{"duplicate key at the set threshold", manyKeys(17, true), `duplicate key "k3"`, 1, 135}, // 1 + 10*6 + 7*8 + 17 commas = 134,
	{"trailing comma in array", `[1, 2,]`, `unexpected "]" (expected a value; trailing commas are not allowed)`, 1, 7},
	{"trailing comma in object", `{"a": 1,}`, `unexpected "}" (expected a string key; trailing commas are not allowed)`, 1, 9},
	{"leading comma", `[,1]`, `unexpected "," (expected a value)`, 1, 2},
	{"double comma", `[1,,2]`, `unexpected "," (expected a value)`, 1, 4},
	{"missing comma", `[1 2]`, `unexpected "2" (expected "," or "]")`, 1, 4},
	{"missing comma in object", `{"a": 1 "b": 2}`, `unexpected "\"" (expected "," or "}")`, 1, 9},
	{"missing colon", `{"a" 1}`, `unexpected "1" (expected ":" after the key)`, 1, 6},
	{"unquoted key", `{a: 1}`, `unexpected "a" (expected a string key or "}")`, 1, 2},
	{"single quotes", `['a']`, `unexpected "'" (expected a value)`, 1, 2},
	{"unclosed array", `[1, 2`, `unexpected end of input (expected "," or "]")`, 1, 6},
	{"unclosed object", `{"a": 1`, `unexpected end of input (expected "," or "}")`, 1, 8},
	{"mismatched close", `[1}`, `unexpected "}" (expected "," or "]")`, 1, 3},
	{"line comment", "[1, // two\n2]", `unexpected "/" (expected a value; comments are not allowed)`, 1, 5},
	{"block comment", "/* c */ 1", `comments are not allowed`, 1, 1},
	{"comment after value", "1 // one", `unexpected "/" (only whitespace may follow the top-level value; comments are not allowed)`, 1, 3},
	{"NaN", `NaN`, `unexpected "NaN" (expected a value)`, 1, 1},
	{"Infinity", `[Infinity]`, `unexpected "Infinity" (expected a value)`, 1, 2},
	{"negative Infinity", `-Infinity`, `invalid number "-Infinity" (expected a digit after "-")`, 1, 1},
	{"misspelt literal", `tru`, `unexpected "tru" (expected a value)`, 1, 1},
	{"literal with suffix", `nullx`, `unexpected "nullx" (expected a value)`, 1, 1},
	{"capitalised literal", `True`, `unexpected "True" (expected a value)`, 1, 1},
	{"leading zero", `01`, `invalid number "01" (leading zeros are not allowed)`, 1, 1},
	{"negative leading zero", `[-012]`, `invalid number "-012" (leading zeros are not allowed)`, 1, 2},
	{"lone minus", `-`, `invalid number "-" (expected a digit after "-")`, 1, 1},
	{"plus sign", `+1`, `unexpected "+1" (expected a value)`, 1, 1},
	{"leading dot", `.5`, `unexpected ".5" (expected a value)`, 1, 1},
	{"trailing dot", `1.`, `invalid number "1." (expected a digit after ".")`, 1, 1},
	{"dot then exponent", `1.e5`, `invalid number "1.e5" (expected a digit after ".")`, 1, 1},
	{"empty exponent", `1e`, `invalid number "1e" (expected a digit in the exponent)`, 1, 1},
	{"signed empty exponent", `[1E+]`, `invalid number "1E+" (expected a digit in the exponent)`, 1, 2},
	{"hex", `0x1F`, `invalid number "0x1F"`, 1, 1},
	{"two dots", `1.2.3`, `invalid number "1.2.3"`, 1, 1},
	{"number with letters", `{"a": 10ms}`, `invalid number "10ms"`, 1, 7},
	{"trailing garbage", `{} x`, `unexpected "x" (only whitespace may follow the top-level value)`, 1, 4},
	{"two values", `1 2`, `unexpected "2" (only whitespace may follow the top-level value)`, 1, 3},
	{"extra close", `[1]]`, `unexpected "]" (only whitespace may follow the top-level value)`, 1, 4},
	{"NUL after value", "1\x00", `unexpected "\x00" (only whitespace`, 1, 2},
	{"byte order mark", "\uFEFF{}", `unexpected "\ufeff" (expected a value)`, 1, 1},
	{"invalid byte outside string", "[\xff]", `unexpected byte 0xff (invalid UTF-8) (expected a value)`, 1, 2},
	{"form feed is not whitespace", "\f1", `unexpected "\f" (expected a value)`, 1, 1},
	{"unterminated string", `["abc`, `unterminated string`, 1, 2},
	{"unterminated string after escape", `"a\n`, `unterminated string`, 1, 1},
	{"backslash at end", `"a\`, `unterminated string`, 1, 1},
	{"newline in string", "{\"a\": \"x\ny\"}", `control character U+000A in string (write it as \n)`, 1, 9},
	{"tab in string", "\"a\tb\"", `control character U+0009 in string (write it as \t)`, 1, 3},
	{"NUL in string after escape", "\"\\n\x00\"", `control character U+0000 in string (write it as \u0000)`, 1, 4},
	{"invalid UTF-8 in string", "\"ab\xffc\"", `invalid UTF-8 in string`, 1, 4},
	{"invalid UTF-8 in key", "{\"\xc3\x28\": 1}", `invalid UTF-8 in string`, 1, 3},
	{"truncated UTF-8 in string", "\"\xe2\x9c\"", `invalid UTF-8 in string`, 1, 2},
	{"overlong UTF-8", "\"\xc0\xaf\"", `invalid UTF-8 in string`, 1, 2},
	{"UTF-8 encoded surrogate", "\"\xed\xa0\x80\"", `invalid UTF-8 in string`, 1, 2},
	{"invalid UTF-8 after escape", "\"\\t\xff\"", `invalid UTF-8 in string`, 1, 4},
	{"unknown escape", `"\x41"`, `invalid escape \x in string`, 1, 2},
	{"escaped single quote", `"\'"`, `invalid escape \' in string`, 1, 2},
	{"escape of a control character", "\"\\\x01\"", `invalid escape in string (a \ must be followed by one of "\/bfnrtu)`, 1, 2},
	{"short unicode escape", `"\u12"`, `invalid escape \u12" in string (expected 4 hex digits)`, 1, 2},
	{"bad hex in unicode escape", `"ok \u00g1"`, `invalid escape \u00g1 in string (expected 4 hex digits)`, 1, 5},
	{"bad second half of a pair", `"\ud83d\uZZZZ"`, `invalid escape \uZZZZ in string`, 1, 8},
	{"column counts characters", `{"é✓": x}`, `unexpected "x" (expected a value)`, 1, 8},
	{"depth 65 arrays", nest("[", "]", 65), "nesting deeper than 64", 1, 65},
	{"depth 65 objects", strings.Repeat(`{"a":`, 65) + "1" + strings.Repeat("}", 65), "nesting deeper than 64", 1, 321},
	{"deep hostile input", strings.Repeat("[", 1<<20), "nesting deeper than 64", 1, 65},
}

func TestParseJSONInvalid(t *testing.T) {
	for _, tc := range invalidJSON {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseJSON([]byte(tc.in))
			if err == nil {
				t.Fatalf("ParseJSON(%.80q) = %s, want an error", tc.in, render(got))
			}
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("ParseJSON(%.80q) error %T %v, want *SyntaxError", tc.in, err, err)
			}
			if got != nil {
				t.Errorf("ParseJSON(%.80q) returned %s with its error, want nil", tc.in, render(got))
			}
			if !strings.Contains(se.Msg, tc.msg) || se.Line != tc.line || se.Col != tc.col {
				t.Errorf("ParseJSON(%.80q) error:\n got line %d, column %d: %s\nwant line %d, column %d: ...%s...",
					tc.in, se.Line, se.Col, se.Msg, tc.line, tc.col, tc.msg)
			}
			checkPosition(t, []byte(tc.in), se)
		})
	}
}

// checkPosition checks that se's line and column describe se's byte offset.
func checkPosition(t *testing.T, in []byte, se *SyntaxError) {
	t.Helper()
	if se.Offset < 0 || se.Offset > len(in) {
		t.Fatalf("error offset %d outside the input (%d bytes)", se.Offset, len(in))
	}
	before := in[:se.Offset]
	line := bytes.Count(before, []byte("\n")) + 1
	col := len([]rune(string(before[bytes.LastIndexByte(before, '\n')+1:]))) + 1
	if se.Line != line || se.Col != col {
		t.Errorf("error at offset %d says line %d, column %d; want line %d, column %d", se.Offset, se.Line, se.Col, line, col)
	}
}

func TestSyntaxErrorText(t *testing.T) {
	_, err := ParseJSON([]byte("{\n  \"rate\": 1,\n  \"rate\": 2\n}"))
	want := `line 3, column 3: duplicate key "rate"`
	if err == nil || err.Error() != want {
		t.Fatalf("error = %v, want %s", err, want)
	}
	var se *SyntaxError
	if !errors.As(err, &se) || se.Offset != 17 {
		t.Fatalf("error = %#v, want a *SyntaxError at offset 17", err)
	}
}

// TestParseJSONStringsShareNoBuffer checks that strings built in the parser's scratch buffer
// do not alias one another.
func TestParseJSONStringsShareNoBuffer(t *testing.T) {
	v, err := ParseJSON([]byte(`["a\tb", "cd\n", "\u00e9f"]`))
	if err != nil {
		t.Fatal(err)
	}
	if g, w := render(v), render(arr("a\tb", "cd\n", "éf")); g != w {
		t.Fatalf("got %s, want %s", g, w)
	}
}

// FuzzParseJSON checks that ParseJSON never panics, that what it accepts encoding/json accepts
// and decodes to the same tree, and that what it rejects is invalid JSON or breaks one of the
// rules encoding/json does not have (duplicate keys, invalid UTF-8, nesting over 64).
func FuzzParseJSON(f *testing.F) {
	for _, tc := range validJSON {
		f.Add([]byte(tc.in))
	}
	for _, tc := range invalidJSON {
		if len(tc.in) < 4096 {
			f.Add([]byte(tc.in))
		}
	}
	for _, s := range []string{
		`{"rules": [{"name": "api", "rate": 100, "per": "1s", "burst": 20, "keys": ["ip", "header:x-user"]}]}`,
		`[1.0e+10, -0.0, 0E0, 1E-0, 9007199254740993]`,
		`"\ud800\udc00\udbff\udfff\ud800"`,
		`{"a": {"b": {"c": [[[null]]]}}}`,
		"[\"\xf0\x9f\x98\x80\", \"\xf4\x90\x80\x80\"]",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := ParseJSON(data)
		if err != nil {
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Fatalf("error %T %v, want *SyntaxError", err, err)
			}
			if got != nil {
				t.Fatalf("returned %s with error %v", render(got), err)
			}
			checkPosition(t, data, se)
			if json.Valid(data) && !strings.Contains(se.Msg, "duplicate key") &&
				!strings.Contains(se.Msg, "invalid UTF-8") && !strings.Contains(se.Msg, "nesting deeper than") {
				t.Fatalf("rejected %q, which encoding/json accepts: %v", data, err)
			}
			return
		}
		if !json.Valid(data) {
			t.Fatalf("accepted %q as %s; encoding/json rejects it", data, render(got))
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var want any
		if err := dec.Decode(&want); err != nil {
			t.Fatalf("accepted %q; encoding/json: %v", data, err)
		}
		if why := agree(got, want); why != "" {
			t.Fatalf("%q: ParseJSON gives %s, encoding/json disagrees: %s", data, render(got), why)
		}
	})
}

// agree compares a tree from ParseJSON with one from encoding/json (with UseNumber) and
// returns "" when they agree, or what differs.
func agree(got Value, want any) string {
	switch g := got.(type) {
	case nil:
		if want != nil {
			return "null vs " + strconv.Quote(render2(want))
		}
	case bool:
		if w, ok := want.(bool); !ok || w != g {
			return strconv.FormatBool(g) + " vs " + render2(want)
		}
	case string:
		if w, ok := want.(string); !ok || w != g {
			return strconv.Quote(g) + " vs " + render2(want)
		}
	case Number:
		w, ok := want.(json.Number)
		if !ok {
			return "number " + string(g) + " vs " + render2(want)
		}
		gf, gerr := strconv.ParseFloat(string(g), 64)
		wf, werr := strconv.ParseFloat(string(w), 64)
		if !floatOK(gerr) || !floatOK(werr) {
			return "number " + string(g) + " does not parse as a float"
		}
		if string(g) != string(w) || gf != wf && !(math.IsNaN(gf) && math.IsNaN(wf)) {
			return "number " + string(g) + " vs " + string(w)
		}
	case []Value:
		w, ok := want.([]any)
		if !ok || g == nil || len(w) != len(g) {
			return "array of " + strconv.Itoa(len(g)) + " vs " + render2(want)
		}
		for i := range g {
			if why := agree(g[i], w[i]); why != "" {
				return "[" + strconv.Itoa(i) + "]: " + why
			}
		}
	case *Object:
		w, ok := want.(map[string]any)
		if !ok || len(g.Keys) != len(g.Vals) || len(w) != len(g.Keys) {
			return "object of " + strconv.Itoa(len(g.Keys)) + " keys vs " + render2(want)
		}
		for i, k := range g.Keys {
			wv, ok := w[k]
			if !ok {
				return "key " + strconv.Quote(k) + " missing in encoding/json's tree"
			}
			if why := agree(g.Vals[i], wv); why != "" {
				return strconv.Quote(k) + ": " + why
			}
		}
	default:
		return "unexpected type in ParseJSON's tree"
	}
	return ""
}

// floatOK reports whether err from strconv.ParseFloat is nil or only says the value is out
// of range (e.g. 1e400), which is still a valid JSON number.
func floatOK(err error) bool {
	var ne *strconv.NumError
	return err == nil || errors.As(err, &ne) && ne.Err == strconv.ErrRange
}

func render2(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "?"
	}
	return string(b)
}
