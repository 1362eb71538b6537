package rules

import (
	"net/http"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/diana-gw/diana/shared/conf"
)

// ruleBy decodes a valid rule named "r" counting by the given "by" JSON value.
func ruleBy(t *testing.T, by string) *Rule {
	t.Helper()
	v, err := conf.ParseJSON([]byte(`{"name": "r", "by": ` + by + `, "limit": {"algorithm": "fixed_window", "limit": 1, "window": "1s"}}`))
	if err != nil {
		t.Fatal(err)
	}
	errs := &conf.Errors{}
	r := DecodeRule(conf.Read(v, errs))
	if err := errs.Err(); err != nil {
		t.Fatalf("by %s: %v", by, err)
	}
	return r
}

func keyOf(r *Rule, in *Input) string { return string(r.key(nil, in)) }

func TestKeys(t *testing.T) {
	full := &Input{
		Method: "GET", Host: "API.Example.com:8443", Path: "/v1/users", ClientIP: "203.0.113.7",
		Consumer: "alice", Route: "users-route",
		Headers: http.Header{"X-Api-Key": {"k-123"}, "X-Device-Id": {"dev-9"}, "X-Dev": {"other"}},
	}
	tests := []struct {
		by   string
		in   *Input
		want string
	}{
		{`["global"]`, full, "r"},
		{`[]`, full, "r"},
		{`["ip"]`, full, "r|203.0.113.7"},
		{`"ip"`, full, "r|203.0.113.7"},
		{`["consumer"]`, full, "r|alice"},
		{`["route"]`, full, "r|users-route"},
		{`["path"]`, full, "r|/v1/users"},
		{`["method"]`, full, "r|GET"},
		{`["host"]`, full, "r|api.example.com:8443"},
		{`["header:X-Api-Key"]`, full, "r|k-123"},
		{`["header:x-api-key"]`, full, "r|k-123"},
		{`["device"]`, full, "r|dev-9"},
		{`["device:X-Dev"]`, full, "r|other"},
		{`["ip", "path"]`, full, "r|203.0.113.7|/v1/users"},
		{`["consumer", "ip", "method"]`, full, "r|alice|203.0.113.7|GET"},
		{`["global", "ip"]`, full, "r|203.0.113.7"},

		// A missing value counts by the client address, or with every request that has none:
		// omitting a header does not escape the rule.
		{`["ip"]`, &Input{}, "r|%none"},
		{`["consumer"]`, &Input{ClientIP: "1.2.3.4"}, "r|%ip:1.2.3.4"},
		{`["route"]`, &Input{ClientIP: "1.2.3.4"}, "r|%ip:1.2.3.4"},
		{`["header:X-Api-Key"]`, &Input{ClientIP: "1.2.3.4"}, "r|%ip:1.2.3.4"},
		{`["header:X-Api-Key"]`, &Input{ClientIP: "2001:db8::/64"}, "r|%ip:2001:db8::/64"},
		{`["header:X-Api-Key"]`, &Input{Headers: http.Header{"X-Api-Key": {""}}}, "r|%none"},
		{`["device"]`, &Input{Headers: http.Header{}}, "r|%none"},
		{`["ip", "consumer"]`, &Input{ClientIP: "1.2.3.4"}, "r|1.2.3.4|%ip:1.2.3.4"},
		{`["consumer", "ip"]`, &Input{ClientIP: "1.2.3.4"}, "r|%ip:1.2.3.4|1.2.3.4"},
		{`["consumer", "ip"]`, &Input{}, "r|%none|%none"},
		{`["global"]`, &Input{}, "r"},
		{`["consumer"]`, &Input{ClientIP: "a|b"}, "r|%ip:a%7Cb"},

		// '|' separates the parts, so it is escaped, and so is the escape character.
		{`["ip", "path"]`, &Input{ClientIP: "a|b", Path: "c"}, "r|a%7Cb|c"},
		{`["ip", "path"]`, &Input{ClientIP: "a", Path: "b|c"}, "r|a|b%7Cc"},
		{`["ip"]`, &Input{ClientIP: "a%7Cb"}, "r|a%257Cb"},
		{`["ip"]`, &Input{ClientIP: "%"}, "r|%25"},
	}
	for _, tt := range tests {
		if got := keyOf(ruleBy(t, tt.by), tt.in); got != tt.want {
			t.Errorf("by %s, %+v: key %q, want %q", tt.by, tt.in, got, tt.want)
		}
	}
}

// Distinct identities get distinct keys, whatever bytes their values hold.
func TestKeysDistinct(t *testing.T) {
	r := ruleBy(t, `["header:X-A", "header:X-B"]`)
	long := strings.Repeat("x", maxValue+1)
	pairs := [][2]string{
		{"a", "b"}, {"a|b", "c"}, {"a", "b|c"}, {"a|", "b"}, {"a", "|b"}, {"a%7Cb", "c"}, {"a%", "7Cb|c"},
		{"a%25", "b"}, {"a%", "25b"}, {"%7C", "%7C"}, {"|", "|"}, {long, "b"}, {long + "y", "b"},
		{strings.Repeat("x", maxValue), "b"}, {"%blake2s:" + strings.Repeat("0", 32), "b"},
		// A missing value (""), and values that spell its markers.
		{"", "b"}, {"%none", "b"}, {"b", ""}, {"", ""}, {"%none", "%none"}, {"%ip:", "b"},
	}
	seen := map[string][2]string{}
	for _, p := range pairs {
		in := &Input{Headers: http.Header{"X-A": {p[0]}, "X-B": {p[1]}}}
		k := keyOf(r, in)
		if prev, dup := seen[k]; dup {
			t.Errorf("%q and %q share the key %q", prev, p, k)
		}
		seen[k] = p
	}
}

// A value over 128 bytes is replaced by its hash, so keys stay short whatever a client sends;
// a value of 128 bytes or less is kept.
func TestKeysLongValues(t *testing.T) {
	r := ruleBy(t, `["header:X-Api-Key"]`)
	key := func(v string) string {
		return keyOf(r, &Input{Headers: http.Header{"X-Api-Key": {v}}})
	}
	exact := strings.Repeat("k", maxValue)
	if got := key(exact); got != "r|"+exact {
		t.Errorf("128-byte value: key %q, want it kept", got)
	}
	for _, n := range []int{maxValue + 1, 1000, 1 << 20} {
		v := strings.Repeat("k", n)
		k := key(v)
		if !strings.HasPrefix(k, "r|%blake2s:") || len(k) != len("r|%blake2s:")+32 {
			t.Errorf("%d-byte value: key %q, want r|%%blake2s: and 32 hex digits", n, k)
		}
		if key(v) != k {
			t.Errorf("%d-byte value: key not stable", n)
		}
		if key(v[:n-1]+"j") == k {
			t.Errorf("%d-byte values differing in the last byte share a key", n)
		}
	}
	// Escaping can triple a value, never more: keys stay bounded.
	bars := strings.Repeat("|", maxValue)
	if k := key(bars); len(k) != len("r|")+3*maxValue {
		t.Errorf("128 bars: key of %d bytes, want %d", len(k), len("r|")+3*maxValue)
	}
}

// key reuses the buffer it is given.
func TestKeyReusesBuffer(t *testing.T) {
	r := ruleBy(t, `["ip"]`)
	buf := make([]byte, 0, 64)
	k := r.key(buf, &Input{ClientIP: "1.2.3.4"})
	if string(k) != "r|1.2.3.4" || &k[0] != &buf[:1][0] {
		t.Errorf("key = %q; buffer reused: %v", k, &k[0] == &buf[:1][0])
	}
	k = r.key(k, &Input{ClientIP: "5.6.7.8"})
	if string(k) != "r|5.6.7.8" {
		t.Errorf("second key = %q", k)
	}
}

// ReadsAddr is false only where the address cannot change the key: over every combination of
// dimensions and of values present or missing, a rule that does not read the address gives the
// same key with and without one.
func TestReadsAddr(t *testing.T) {
	dims := []string{`"ip"`, `"consumer"`, `"route"`, `"path"`, `"header:X-Api-Key"`, `"device"`, `"global"`}
	for mask := 1; mask < 1<<len(dims); mask++ {
		var by []string
		for i, d := range dims {
			if mask&(1<<i) != 0 {
				by = append(by, d)
			}
		}
		r := ruleBy(t, "["+strings.Join(by, ",")+"]")
		for present := 0; present < 16; present++ {
			in := Input{Path: "/p"}
			if present&1 != 0 {
				in.Consumer = "c"
			}
			if present&2 != 0 {
				in.Route = "r"
			}
			h := http.Header{}
			if present&4 != 0 {
				h.Set("X-Api-Key", "k")
			}
			if present&8 != 0 {
				h.Set("X-Device-Id", "d")
			}
			in.Headers = h
			reads := r.ReadsAddr(&in)
			without := keyOf(r, &in)
			in.SetClient(netip.MustParseAddr("192.0.2.1"), 64)
			if with := keyOf(r, &in); !reads && with != without {
				t.Errorf("by %v, %+v: ReadsAddr false, but the key is %q with the address, %q without", by, in, with, without)
			}
			if !reads && slices.Contains(by, `"ip"`) {
				t.Errorf("by %v: ReadsAddr false for a rule counting by ip", by)
			}
		}
	}
	m := ruleBy(t, `["global"], "match": {"clients": ["10.0.0.0/8"]}`)
	if !m.ReadsAddr(&Input{}) {
		t.Error("a rule matching clients does not read the address")
	}
}

// WithoutClient replaces exactly the client-address parts of a key, whatever its other parts
// hold: a value cannot spell "%ip:", whose '%' is escaped.
func TestWithoutClient(t *testing.T) {
	tests := []struct {
		by   string
		in   *Input
		want string
	}{
		{`["route"]`, &Input{Route: "users", ClientIP: "1.2.3.4"}, "r|users"},
		{`["route"]`, &Input{ClientIP: "1.2.3.4"}, "r|%none"},
		{`["route"]`, &Input{ClientIP: "a|b"}, "r|%none"},
		{`["route"]`, &Input{}, "r|%none"},
		{`["global"]`, &Input{ClientIP: "1.2.3.4"}, "r"},
		{`["route", "consumer"]`, &Input{ClientIP: "1.2.3.4"}, "r|%none|%none"},
		{`["route", "consumer"]`, &Input{Route: "x", ClientIP: "1.2.3.4"}, "r|x|%none"},
		{`["consumer", "route"]`, &Input{Route: "x", ClientIP: "1.2.3.4"}, "r|%none|x"},
		{`["route"]`, &Input{Route: "%ip:1.2.3.4", ClientIP: "5.6.7.8"}, "r|%25ip:1.2.3.4"},
		{`["route", "ip"]`, &Input{Route: "|%ip:x", ClientIP: "5.6.7.8"}, "r|%7C%25ip:x|5.6.7.8"},
	}
	for _, tt := range tests {
		key := keyOf(ruleBy(t, tt.by), tt.in)
		if got := WithoutClient(key); got != tt.want {
			t.Errorf("by %s, %+v: WithoutClient(%q) = %q, want %q", tt.by, tt.in, key, got, tt.want)
		}
	}
}

// TestDimensionArgs: a kind's Arg (the argument's form in the JSON Schema) accepts exactly the
// arguments its New accepts, on arguments of every shape; a kind without Arg takes none.
func TestDimensionArgs(t *testing.T) {
	args := []string{"X-Api-Key", "model", "usage.total_tokens", "a.b.c", "a+b", "a b", "a..b", ".a", "a.",
		"x:y", "é", "a\"b", "{}", "1", strings.Repeat("a.", 15) + "a", strings.Repeat("a.", 16) + "a"}
	for _, name := range Dimensions() {
		k, _ := DimensionNamed(name)
		if k.Arg == "" {
			if _, reason := k.New("X-Test"); reason == "" {
				t.Errorf("%s takes an argument but states no Arg", name)
			}
			continue
		}
		form := regexp.MustCompile("^(?:" + k.Arg + ")$")
		for _, a := range args {
			_, reason := k.New(a)
			if form.MatchString(a) != (reason == "") {
				t.Errorf("%s:%q: New says %q, but Arg %s matches: %v", name, a, reason, k.Arg, form.MatchString(a))
			}
		}
	}
}
