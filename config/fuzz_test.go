package config

import (
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/diana-gw/diana/shared/conf"
	"github.com/diana-gw/diana/shared/jsontok"
)

// fuzzNames are the document names FuzzDecode picks from: each syntax by extension, and by
// content (a name without a known extension, a URL whose query must be ignored).
var fuzzNames = []string{"c.json", "c.yaml", "c.yml", "remote", "https://example.com/c.json?v=.yaml#x.yml"}

// FuzzDecode: Decode never panics, and never passes on a yaml.v3 failure it had to recover
// from; it is deterministic; an error starts with the document's name; a result holds only
// the value types conf documents, objects without duplicate keys, numbers in the JSON form, and
// (aliases expanded) at most MaxAliasValues more values and MaxAliasText more bytes of text than
// the document could have written; a JSON document gives the same tree through YAML as through
// conf.ParseJSON.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"version": 1, "rules": [{"name": "a", "by": ["ip"], "limit": {"algorithm": "token_bucket", "rate": 10, "period": "1s"}}]}`,
		"version: 1\nrules:\n  - name: a\n    limit: {algorithm: fixed_window, limit: 5, window: 1m}\n",
		"base: &b {x: 1, y: [1, 2]}\nuse:\n  <<: *b\n  y: 3\n",
		"a: &a [x, x]\nb: &b [*a, *a]\nc: &c [*b, *b]\nd: [*c, *c, *c]\n",
		"a: 0x1F\nb: 010\nc: 1_000\nd: .inf\ne: +1\n",
		"a: !!binary aGk=\n",
		"a: 1\n---\nb: 2\n",
		"# only a comment\n",
	} {
		for k := range fuzzNames {
			f.Add([]byte(s), uint8(k))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, k uint8) {
		name := fuzzNames[int(k)%len(fuzzNames)]
		v, err := Decode(data, name)
		v2, err2 := Decode(data, name)
		if (err == nil) != (err2 == nil) || err != nil && err.Error() != err2.Error() || !reflect.DeepEqual(v, v2) {
			t.Fatalf("two decodings differ: %#v, %v and %#v, %v", v, err, v2, err2)
		}
		if err != nil {
			if v != nil {
				t.Fatalf("a value %#v with the error %v", v, err)
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, name+": ") {
				t.Fatalf("error %q does not start with the name %q", msg, name)
			}
			if strings.Contains(msg, "YAML parser failed") {
				t.Fatalf("yaml.v3 panicked: %v", err)
			}
			if isJSON(data, name) && msg != name+": empty document" {
				var se *conf.SyntaxError
				if !errors.As(err, &se) {
					t.Fatalf("JSON error %v does not wrap a *conf.SyntaxError", err)
				}
			}
			return
		}
		n, text := checkTree(t, v)
		// A written node takes at least a byte, or three nodes share one ("a:" is a mapping, a
		// key and a null), so this bounds what a document may expand to, whatever its aliases.
		if limit := 3*len(data) + 3 + MaxAliasValues; n > limit {
			t.Fatalf("%d bytes decode to %d values, more than %d", len(data), n, limit)
		}
		// An escape decodes to at most twice its length ("\L" is 3 bytes of UTF-8).
		if limit := 2*len(data) + MaxAliasText; text > limit {
			t.Fatalf("%d bytes decode to %d bytes of keys and strings, more than %d", len(data), text, limit)
		}
		if isJSON(data, name) {
			return
		}
		// YAML 1.2 reads JSON as JSON: a valid JSON document must not mean something else
		// because its file is named .yaml.
		if j, err := conf.ParseJSON(data); err == nil && !sameTree(j, v) {
			t.Fatalf("JSON %q decodes as YAML to %#v, as JSON to %#v", data, v, j)
		}
	})
}

// checkTree checks that v holds only the types Decode documents, and returns its values and the
// bytes of its keys and strings.
func checkTree(t *testing.T, v conf.Value) (n, text int) {
	t.Helper()
	switch v := v.(type) {
	case nil, bool:
		return 1, 0
	case string:
		return 1, len(v)
	case conf.Number:
		if !jsontok.IsNumber(string(v)) {
			t.Fatalf("number %q is not in the JSON form", v)
		}
		return 1, len(v)
	case []conf.Value:
		n := 1
		for _, e := range v {
			en, et := checkTree(t, e)
			n, text = n+en, text+et
		}
		return n, text
	case *conf.Object:
		if len(v.Keys) != len(v.Vals) {
			t.Fatalf("object with %d keys and %d values", len(v.Keys), len(v.Vals))
		}
		seen := make(map[string]bool, len(v.Keys))
		n := 1
		for i, k := range v.Keys {
			if seen[k] {
				t.Fatalf("duplicate key %q in the result", k)
			}
			seen[k] = true
			en, et := checkTree(t, v.Vals[i])
			n, text = n+en, text+len(k)+et
		}
		return n, text
	}
	t.Fatalf("value of type %T", v)
	return 0, 0
}

// sameTree reports whether a and b hold the same values (an empty list or object whether nil or
// not).
func sameTree(a, b conf.Value) bool {
	switch a := a.(type) {
	case []conf.Value:
		b, ok := b.([]conf.Value)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !sameTree(a[i], b[i]) {
				return false
			}
		}
		return true
	case *conf.Object:
		b, ok := b.(*conf.Object)
		if !ok || len(a.Keys) != len(b.Keys) {
			return false
		}
		for i := range a.Keys {
			if a.Keys[i] != b.Keys[i] || !sameTree(a.Vals[i], b.Vals[i]) {
				return false
			}
		}
		return true
	case conf.Number:
		// Known gap: yaml.v3 resolves a number beyond float64 (1e999) as a string, so YAML
		// gives the string "1e999" where JSON gives the number. Both are refused wherever a
		// number is read; remove this case once Decode makes them numbers (or errors).
		if s, ok := b.(string); ok && s == string(a) {
			_, err := strconv.ParseFloat(s, 64)
			return errors.Is(err, strconv.ErrRange)
		}
	}
	return a == b
}
