package jsontok

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// tokens reads doc fed in chunks of size (0: whole) and renders every token, ending with the
// error's offset and message if there is one.
func tokens(doc []byte, size, maxText int) string {
	var t Tokenizer
	t.Reset(0, maxText)
	var b strings.Builder
	if size == 0 {
		size = max(len(doc), 1)
	}
	for i := 0; i < len(doc); i += size {
		t.Feed(doc[i:min(i+size, len(doc))])
		if !drain(&t, &b) {
			return b.String()
		}
	}
	t.End()
	drain(&t, &b)
	return b.String()
}

// drain renders the tokens t has until it needs more input; false after an error.
func drain(t *Tokenizer, b *strings.Builder) bool {
	for {
		k := t.Next()
		switch k {
		case None:
			return true
		case Error:
			b.WriteString("error@" + strconv.FormatInt(t.Err().Offset, 10) + ": " + t.Err().Message(nil))
			return false
		case Key, String, Number:
			b.WriteString(k.String() + "(" + strconv.Quote(string(t.Text())) + ")")
			if t.Long() {
				b.WriteString("…")
			}
		default:
			b.WriteString(k.String())
		}
		b.WriteString(" ")
	}
}

var golden = []struct{ in, want string }{
	{`{"a": [1, -2.5e3, "x\ny", true, false, null], "b": {}}`,
		`{ key("a") [ number("1") number("-2.5e3") string("x\ny") true false null ] key("b") { } } `},
	{`"\ud83d\ude00\u00e9"`, `string("😀é") `},
	{`"\ud83dx"`, "string(\"\ufffdx\") "},
	{`"\ud83d\u0041"`, "string(\"\ufffdA\") "},
	{`"\ude00"`, "string(\"\ufffd\") "},
	{`"\ud83d"`, "string(\"\ufffd\") "},
	{`0`, `number("0") `},
	{` [ ] `, `[ ] `},
	{`[1,]`, `[ number("1") error@3: unexpected "]" (expected a value; trailing commas are not allowed)`},
	{`{"a":1,}`, `{ key("a") number("1") error@7: unexpected "}" (expected a string key; trailing commas are not allowed)`},
	{`nullx`, `error@0: unexpected "nullx" (expected a value)`},
	{`tru`, `error@0: unexpected "tru" (expected a value)`},
	{`01`, `error@0: invalid number "01" (leading zeros are not allowed)`},
	{`10ms`, `error@0: invalid number "10m"`},
	{`-`, `error@0: invalid number "-" (expected a digit after "-")`},
	{`1.`, `error@0: invalid number "1." (expected a digit after ".")`},
	{`1e+`, `error@0: invalid number "1e+" (expected a digit in the exponent)`},
	{`[1 // c`, `[ number("1") error@3: unexpected "/" (expected "," or "]"; comments are not allowed)`},
	{`{"a" 1}`, `{ key("a") error@5: unexpected "1" (expected ":" after the key)`},
	{`{} x`, `{ } error@3: unexpected "x" (only whitespace may follow the top-level value)`},
	{"\"a\tb\"", `error@2: control character U+0009 in string (write it as \t)`},
	{"\"ab\xffc\"", `error@3: invalid UTF-8 in string`},
	{"\"\xe2\x9c\"", `error@1: invalid UTF-8 in string`},
	{`"\x41"`, `error@1: invalid escape \x in string`},
	{`"\u12"`, `error@1: invalid escape \u12" in string (expected 4 hex digits)`},
	{`"abc`, `error@0: unterminated string`},
	{``, `error@0: empty document (expected a value)`},
	{`{"a":`, `{ key("a") error@5: unexpected end of input (expected a value)`},
	{"[\xff]", `[ error@1: unexpected byte 0xff (invalid UTF-8) (expected a value)`},
}

func TestGolden(t *testing.T) {
	for _, g := range golden {
		if got := tokens([]byte(g.in), 0, 0); got != g.want {
			t.Errorf("%q:\n got %s\nwant %s", g.in, got, g.want)
		}
	}
}

// TestChunks checks that a document reads the same whatever its chunks: whole, byte by byte,
// and split in two at every position.
func TestChunks(t *testing.T) {
	docs := []string{
		`{"id":"chatcmpl-1","choices":[{"delta":{"content":"h\u00e9llo \ud83d\ude00"}}],"usage":{"prompt_tokens":12,"total_tokens":-3.5e-2}}`,
		"[\"\xf0\x9f\x98\x80 \xe2\x9c\x93\", 123456789012345678901234567890, true, null, {\"\": false}]",
		`"\ud83d\ud83d\ude00 \u0041\t"`,
	}
	for _, g := range golden {
		docs = append(docs, g.in)
	}
	for _, d := range docs {
		whole := tokens([]byte(d), 0, 0)
		if got := tokens([]byte(d), 1, 0); got != whole {
			t.Errorf("%q byte by byte:\n got %s\nwant %s", d, got, whole)
		}
		for i := 1; i < len(d); i++ {
			var tk Tokenizer
			tk.Reset(0, 0)
			got := twoChunks(&tk, []byte(d), i)
			if got != whole {
				t.Errorf("%q split at %d:\n got %s\nwant %s", d, i, got, whole)
				break
			}
		}
	}
}

func twoChunks(t *Tokenizer, d []byte, i int) string {
	// The chunks are copies, overwritten once read: a token's text must not keep pointing into them.
	a, b := append([]byte(nil), d[:i]...), append([]byte(nil), d[i:]...)
	var out strings.Builder
	t.Feed(a)
	if !drain(t, &out) {
		return out.String()
	}
	t.Feed(b)
	for j := range a {
		a[j] = '#'
	}
	if !drain(t, &out) {
		return out.String()
	}
	t.End()
	drain(t, &out)
	return out.String()
}

// TestMaxText checks that a long string or number keeps MaxText bytes of its text, says so, and
// that reading one of any size allocates no more.
func TestMaxText(t *testing.T) {
	if got, want := tokens([]byte(`["abcdefgh", 123456789, "ab"]`), 3, 4), `[ string("abcd")… number("1234")… string("ab") ] `; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
	chunk := bytes.Repeat([]byte("x\\n\xc3\xa9"), 8<<10)
	var tk Tokenizer
	tk.Reset(0, 256)
	feed := func(p []byte) {
		tk.Feed(p)
		for k := tk.Next(); k != None; k = tk.Next() {
			if k != BeginObject && k != Key {
				t.Fatalf("got %v", k)
			}
		}
	}
	feed([]byte(`{"k": "`))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range 64 << 20 / len(chunk) {
		feed(chunk)
	}
	runtime.ReadMemStats(&after)
	tk.Feed([]byte(`"}`))
	tk.End()
	if k := tk.Next(); k != String || len(tk.Text()) != 256 || !tk.Long() {
		t.Fatalf("got %v of %d bytes (long %v)", k, len(tk.Text()), tk.Long())
	}
	if n := after.TotalAlloc - before.TotalAlloc; n > 64<<10 {
		t.Errorf("reading a 64 MiB string allocated %d bytes", n)
	}
}

func TestDepth(t *testing.T) {
	var tk Tokenizer
	tk.Reset(3, 0)
	tk.Feed([]byte(`[[[[]]]]`))
	for tk.Next() != Error {
	}
	if e := tk.Err(); !e.TooDeep() || e.Offset != 3 {
		t.Fatalf("got %v", e)
	}
}

func TestIsNumber(t *testing.T) {
	for s, want := range map[string]bool{"0": true, "-0": true, "1.5e+3": true, "12": true, "1.5": true, "-1.5e10": true, "1E+2": true, "1e-2": true,
		"": false, "01": false, "1.": false, "+1": false, "1e": false, "1e+": false, "0x1": false, "-": false, "1 ": false, ".5": false,
		"1_0": false, "1.5.2": false, "--1": false} {
		if IsNumber(s) != want {
			t.Errorf("IsNumber(%q) = %v", s, !want)
		}
	}
}

// FuzzTokenizer checks the tokens against encoding/json's: a document one accepts the other
// accepts (but for what jsontok refuses on purpose: invalid UTF-8, nesting deeper than 64), with
// the same tokens; and the tokens do not change when the document comes in two chunks.
func FuzzTokenizer(f *testing.F) {
	for _, g := range golden {
		f.Add([]byte(g.in), 1)
	}
	f.Add([]byte(`{"a":[{"b":"\u00e9"},1e5,-0.0]}`), 7)
	f.Fuzz(func(t *testing.T, doc []byte, split int) {
		whole := tokens(doc, 0, 0)
		if split > 0 && split < len(doc) {
			var tk Tokenizer
			tk.Reset(0, 0)
			if got := twoChunks(&tk, doc, split); got != whole {
				t.Fatalf("%q split at %d:\n got %s\nwant %s", doc, split, got, whole)
			}
		}
		failed := strings.Contains(whole, "error@")
		if failed != !json.Valid(doc) && !strings.Contains(whole, "UTF-8") && !strings.Contains(whole, "nesting") {
			t.Fatalf("%q: jsontok %s; encoding/json valid: %v", doc, whole, json.Valid(doc))
		}
		if failed {
			return
		}
		dec := json.NewDecoder(bytes.NewReader(doc))
		dec.UseNumber()
		var want strings.Builder
		for {
			tok, err := dec.Token()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%q: encoding/json: %v", doc, err)
			}
			switch v := tok.(type) {
			case json.Delim:
				want.WriteString(v.String() + " ")
			case string:
				want.WriteString(strconv.Quote(v) + " ")
			case json.Number:
				want.WriteString(string(v) + " ")
			case bool:
				want.WriteString(strconv.FormatBool(v) + " ")
			case nil:
				want.WriteString("null ")
			}
		}
		var got strings.Builder
		var tk Tokenizer
		tk.Reset(0, 0)
		tk.Feed(doc)
		tk.End()
		for k := tk.Next(); k != None; k = tk.Next() {
			switch k {
			case Key, String:
				got.WriteString(strconv.Quote(string(tk.Text())) + " ")
			case Number:
				got.WriteString(string(tk.Text()) + " ")
			default:
				got.WriteString(k.String() + " ")
			}
		}
		if got.String() != want.String() {
			t.Fatalf("%q:\n got %s\nwant %s", doc, got.String(), want.String())
		}
	})
}
