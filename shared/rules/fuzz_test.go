package rules_test

import (
	"context"
	"encoding/hex"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/crypto/blake2s"

	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/conf"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/memstore"
)

// FuzzDecode: decoding any JSON document never panics; every error has a reason and the path
// of a field under "rules" (or the root); a document without errors gives rules that an Engine
// accepts, whose fields are within their documented bounds, and that decide requests.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{"rules": [{"name": "a", "by": ["ip", "header:X-Key"], "limit": {"algorithm": "token_bucket", "rate": 10, "period": "1s", "burst": 5}}]}`,
		`{"rules": [{"name": "b", "mode": "cluster", "on_error": "local", "nodes": 3, "ban": "1m", "limit": {"algorithm": "sliding_window", "limit": 7, "window": "10s"}}]}`,
		`{"rules": [{"name": "c", "action": "delay", "max_delay": "2s", "match": {"methods": ["GET"], "paths": ["/a/*/b/**"], "hosts": ["*.example.com", "[::1]"], "headers": {"X-Env": "*"}}, "limit": {"algorithm": "fixed_window", "limit": 1, "window": "1h"}}]}`,
		`{"rules": [{"name": "d", "limit": {"algorithm": "concurrency", "max": 2, "lease": "30s"}, "reply": {"status": 503, "message": "busy", "headers": false, "legacy_headers": true}}]}`,
		`{"rules": [{"name": "e", "by": ["device:X-Dev", "consumer", "route", "path", "method", "host"], "cost": 0, "action": "shadow", "limit": {"algorithm": "sliding_log", "limit": 3, "window": "1m"}}]}`,
		`{"rules": [{"name": "w", "limit": {"algorithm": "warm_up", "rate": 100, "period": "1s", "warmup": "1m"}}, {"name": "l", "limit": {"algorithm": "leaky_bucket", "rate": 5, "period": "1s", "burst": 2}}]}`,
		`{"rules": [{"name": "a", "limit": {}}, {"name": "a", "by": ["nope", "header:", "ip:x"], "limit": {"algorithm": "token_bucket", "rate": 99999999999999999999, "period": "-1s"}}]}`,
		`{"rules": [{"name": "` + strings.Repeat("n", 65) + `", "limit": {"algorithm": "fixed_window", "limit": 1e400, "window": "1d"}}]}`,
		`{"rules": {"name": "x"}}`, `[]`, `{"rules": [null, 1, "x", []]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		doc, err := conf.ParseJSON(data)
		if err != nil {
			return
		}
		errs := &conf.Errors{}
		rs := rules.Decode(conf.Read(doc, errs))
		if len(errs.List) > 0 {
			for _, e := range errs.List {
				if e.Reason == "" || e.Path != "" && e.Path != "rules" && !strings.HasPrefix(e.Path, "rules[") && !strings.HasPrefix(e.Path, "rules.") {
					t.Fatalf("error with path %q and reason %q", e.Path, e.Reason)
				}
			}
			return
		}
		names := map[string]bool{}
		for _, r := range rs {
			switch {
			case !validName(r.Name) || names[r.Name]:
				t.Fatalf("rule name %q is invalid or a duplicate", r.Name)
			case r.Alg == nil || len(r.By) == 0 || r.Cost < 0 || r.Cost > algos.MaxSafe:
				t.Fatalf("rule %s: algorithm %v, by %q, cost %d", r.Name, r.Alg, r.By, r.Cost)
			case r.Reply.Status < 400 || r.Reply.Status > 599:
				t.Fatalf("rule %s: reply status %d", r.Name, r.Reply.Status)
			case r.Action == rules.Delay && r.MaxDelay <= 0:
				t.Fatalf("rule %s: delay without max_delay", r.Name)
			case r.Mode == rules.Cluster && r.OnError == rules.FailLocal && r.Fallback == nil:
				t.Fatalf("rule %s: on_error local without a fallback", r.Name)
			}
			names[r.Name] = true
		}
		mem := memstore.New(memstore.Options{MaxEntries: 64})
		e, err := rules.New(rs, rules.Options{Local: rules.Each(mem.Decide), Cluster: rules.Each(mem.Decide)})
		if err != nil {
			t.Fatalf("valid rules refused by the engine: %v", err)
		}
		for _, in := range []rules.Input{{}, {Method: "GET", Host: "a.example.com", Path: "/a/x/b", ClientIP: "192.0.2.1",
			Consumer: "c", Route: "r", Headers: http.Header{"X-Key": {"k"}, "X-Env": {"p"}, "X-Dev": {"d"}}}} {
			res := e.Check(context.Background(), &in)
			e.Release(context.Background(), &res)
		}
	})
}

func validName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range []byte(s) {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// fuzzRules are the fixed rules of FuzzCheck: rules that count by dimensions, and rules that
// match on methods and headers (paths and hosts are fuzzed).
const fuzzRules = `{"rules": [
	{"name": "k-ip", "by": ["ip"], "limit": {"algorithm": "fixed_window", "limit": 1000000, "window": "1h"}},
	{"name": "k-all", "by": ["ip", "consumer", "route", "path", "method", "host", "header:X-Api-Key", "device"],
	 "limit": {"algorithm": "token_bucket", "rate": 1000000, "period": "1s"}},
	{"name": "k-dev", "by": ["device"], "limit": {"algorithm": "fixed_window", "limit": 1000000, "window": "1h"}},
	{"name": "m-meth", "match": {"methods": ["GET", "POST"]}, "limit": {"algorithm": "fixed_window", "limit": 1000000, "window": "1h"}},
	{"name": "m-hdr", "match": {"headers": {"X-Api-Key": "*"}}, "limit": {"algorithm": "fixed_window", "limit": 1000000, "window": "1h"}},
	{"name": "m-hdrv", "match": {"headers": {"X-Device-Id": "dev-1"}}, "limit": {"algorithm": "fixed_window", "limit": 1000000, "window": "1h"}}]}`

// refPart is one part of a key as rules documents it: "|" and the value with '%' and '|'
// escaped, or a value over 128 bytes as "%blake2s:" and the first 16 bytes of its BLAKE2s-256 in hex.
func refPart(v string) string {
	if len(v) > 128 {
		sum := blake2s.Sum256([]byte(v))
		return "|%blake2s:" + hex.EncodeToString(sum[:16])
	}
	return "|" + strings.NewReplacer("%", "%25", "|", "%7C").Replace(v)
}

// refMethod is the method as Match documents it, for the "method" dimension: upper-cased
// (ASCII letters only: other bytes are kept), HEAD counted as GET.
func refMethod(m string) string {
	b := []byte(m)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	if string(b) == "HEAD" {
		return "GET"
	}
	return string(b)
}

// refMatchPath matches a path against a pattern as Match documents it, segment by segment.
func refMatchPath(pattern, path string) bool {
	pat := strings.Split(pattern[1:], "/")
	if pat[0] == "**" {
		return true
	}
	if !strings.HasPrefix(path, "/") {
		return false
	}
	segs := strings.Split(path[1:], "/")
	for i, p := range pat {
		if p == "**" {
			return true
		}
		if i >= len(segs) || p == "*" && segs[i] == "" || p != "*" && segs[i] != p {
			return false
		}
	}
	return len(segs) == len(pat)
}

// swapASCIICase swaps the case of ASCII letters only.
func swapASCIICase(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case 'a' <= c && c <= 'z':
			b[i] = c - 32
		case 'A' <= c && c <= 'Z':
			b[i] = c + 32
		}
	}
	return string(b)
}

// FuzzCheck sends any request through an Engine over a memstore, and checks the keys the store
// is asked for against the documented key format (the rule's name, then per dimension "|" and
// the escaped value, hashed over 128 bytes), hence their bound; that a rule applies exactly when
// its match does and the request has every dimension it counts by; that the same request gets
// the same keys and distinct client IPs distinct keys; and path and host patterns against their
// documentation.
func FuzzCheck(f *testing.F) {
	big := strings.Repeat("|%", 100)
	f.Add("GET", "api.example.com", "/users/1/orders", "192.0.2.1", "192.0.2.2", "alice", "r1", "key", "dev-1", "/users/*/orders", "*.example.com")
	f.Add("POST", "API.Example.COM.:8443", "/api/", "2001:db8::/64", "2001:db9::/64", "", "", "", "", "/api/**", "api.example.com")
	f.Add("get", "[::1]:80", "/a//b", "", "192.0.2.1", "a|b", "a%7Cb", "%blake2s:00", big, "/**", "[::1]")
	f.Add("\x00", "\xff\xfe", "/\xc3\x28/\x00", "\x00", "\x00\x00", big+"x", big+"y", "\n", "\r\n", "/*", "*.x")
	f.Add("GET", strings.Repeat("A", 200), "/"+strings.Repeat("é", 100), strings.Repeat("1", 129), strings.Repeat("1", 128), "c", "r", "k", "d", "/x/**", "a-b_c.d")
	base, errs := decodeRules(fuzzRules)
	if err := errs.Err(); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, method, host, path, ip, ip2, consumer, route, apiKey, device, pathPattern, hostPattern string) {
		rs := append([]*rules.Rule(nil), base...)
		var pathRule, hostRule *rules.Rule
		if r, ok := matchRule("m-path", "paths", pathPattern); ok {
			pathRule = r
			rs = append(rs, r)
		}
		if r, ok := matchRule("m-host", "hosts", hostPattern); ok {
			hostRule = r
			rs = append(rs, r)
		}
		mem := memstore.New(memstore.Options{MaxEntries: 1024})
		var keys map[string]string // rule name → the key the store was asked for
		store := rules.Each(func(key string, alg algos.Algorithm, r algos.Request) algos.Decision {
			name, _, _ := strings.Cut(key, "|")
			if k, dup := keys[name]; dup && k != key {
				t.Fatalf("rule %s: keys %q and %q for one request", name, k, key)
			}
			keys[name] = key
			return mem.Decide(key, alg, r)
		})
		e, err := rules.New(rs, rules.Options{Local: store})
		if err != nil {
			t.Fatal(err)
		}
		check := func(ip string) map[string]string {
			keys = map[string]string{}
			in := rules.Input{Method: method, Host: host, Path: path, ClientIP: ip, Consumer: consumer, Route: route,
				Headers: http.Header{"X-Api-Key": {apiKey}, "X-Device-Id": {device}}}
			res := e.Check(context.Background(), &in)
			e.Release(context.Background(), &res)
			return keys
		}
		got := check(ip)

		want := map[string]string{}
		np, pathOK := rules.NormalPath(path, rules.DecodeSlashes) // what Check matches and counts
		if pathOK {
			path = np // check sends it again: a normal path is its own normal form
		}
		// A missing value counts by the address, or with every request without one.
		part := func(v string) string {
			switch {
			case v != "":
				return refPart(v)
			case ip != "":
				return "|%ip:" + refPart(ip)[1:]
			}
			return "|%none"
		}
		ipPart := refPart(ip)
		if ip == "" {
			ipPart = "|%none"
		}
		want["k-ip"] = "k-ip" + ipPart
		// The rules see the method upper-cased (ASCII only), and count HEAD as GET.
		meth := refMethod(method)
		want["k-all"] = "k-all" + ipPart + part(consumer) + part(route) + part(path) + part(meth) +
			part(strings.ToLower(host)) + part(apiKey) + part(device)
		want["k-dev"] = "k-dev" + part(device)
		if meth == "GET" || meth == "POST" { // HEAD is counted as GET, and GET's rules match it
			want["m-meth"] = "m-meth"
		}
		if apiKey != "" {
			want["m-hdr"] = "m-hdr"
		}
		if device == "dev-1" {
			want["m-hdrv"] = "m-hdrv"
		}
		if np, _ := rules.NormalPath(pathPattern, rules.KeepSlashes); pathRule != nil && refMatchPath(np, path) {
			want["m-path"] = "m-path"
		}
		if hostRule != nil {
			in := rules.Input{Host: host}
			m := hostRule.Match.Matches(&in)
			if m {
				want["m-host"] = "m-host"
			}
			// Case, and a port added to a host without one, do not change a host's match.
			variants := []string{swapASCIICase(host)}
			if !strings.Contains(host, ":") {
				variants = append(variants, host+":8080")
			}
			for _, h := range variants {
				if in := (rules.Input{Host: h}); hostRule.Match.Matches(&in) != m {
					t.Errorf("host pattern %q matches %q: %v, but %q: %v", hostPattern, host, m, h, !m)
				}
			}
		}
		if !pathOK { // a control character in the path: refused before any rule is asked
			want = map[string]string{}
		}
		for name, k := range got {
			if want[name] != k {
				t.Errorf("rule %s: key %q, want %q", name, k, want[name])
			}
			// Each part is at most 3 × 128 bytes escaped (after "|%ip:" for a missing value), or
			// 40 hashed: a key never grows with input.
			if parts := strings.Count(want[name], "|"); len(k) > len(name)+parts*(5+3*128) {
				t.Errorf("rule %s: key of %d bytes, over the bound", name, len(k))
			}
		}
		for name, k := range want {
			if _, ok := got[name]; !ok {
				t.Errorf("rule %s does not apply, want key %q", name, k)
			}
		}
		if validUTF8(method, host, path, ip, consumer, route, apiKey, device) && !utf8.ValidString(got["k-all"]) {
			t.Errorf("valid UTF-8 input, invalid UTF-8 key %q", got["k-all"])
		}

		again := check(ip)
		for name, k := range got {
			if again[name] != k {
				t.Errorf("rule %s: the same request gave keys %q and %q", name, k, again[name])
			}
		}
		if k2 := check(ip2)["k-ip"]; pathOK && ip != "" && ip2 != "" && (ip == ip2) != (got["k-ip"] == k2) {
			t.Errorf("client IPs %q and %q give keys %q and %q", ip, ip2, got["k-ip"], k2)
		}
	})
}

func validUTF8(list ...string) bool {
	for _, s := range list {
		if !utf8.ValidString(s) {
			return false
		}
	}
	return true
}

func decodeRules(doc string) ([]*rules.Rule, *conf.Errors) {
	errs := &conf.Errors{}
	v, err := conf.ParseJSON([]byte(doc))
	if err != nil {
		errs.Add("", err.Error())
		return nil, errs
	}
	return rules.Decode(conf.Read(v, errs)), errs
}

// matchRule decodes a rule named name that matches field (paths or hosts) against pattern; ok is
// false when the pattern is refused.
func matchRule(name, field, pattern string) (*rules.Rule, bool) {
	m := &conf.Object{}
	m.Set(field, []conf.Value{pattern})
	lim := &conf.Object{}
	lim.Set("algorithm", "fixed_window")
	lim.Set("limit", conf.Number("1000000"))
	lim.Set("window", "1h")
	r := &conf.Object{}
	r.Set("name", name)
	r.Set("match", m)
	r.Set("limit", lim)
	errs := &conf.Errors{}
	rule := rules.DecodeRule(conf.Read(r, errs))
	return rule, len(errs.List) == 0
}

// FuzzClientKey: ClientKey is "" exactly for an invalid address; an IPv4 address (IPv4-mapped
// included) or an IPv6 address counted whole is its text without zone, an IPv6 address counted
// by prefix is its network; two addresses get the same key exactly when they are the same
// client under that rule.
func FuzzClientKey(f *testing.F) {
	f.Add("192.0.2.1", "::ffff:192.0.2.1", uint8(64))
	f.Add("2001:db8:1:2:3:4:5:6", "2001:db8:1:2::9", uint8(64))
	f.Add("fe80::1%eth0", "fe80::1%eth1", uint8(128))
	f.Add("2001:db8::1", "2001:db8::1", uint8(0))
	f.Add("", "not an address", uint8(200))
	f.Add("::", "0.0.0.0", uint8(1))
	f.Fuzz(func(t *testing.T, a, b string, prefix uint8) {
		p := int(prefix) % 130
		key := func(s string) (string, netip.Addr) {
			addr, _ := netip.ParseAddr(s)
			k := rules.ClientKey(addr, p)
			if !addr.IsValid() {
				if k != "" {
					t.Fatalf("ClientKey(invalid %q) = %q", s, k)
				}
				return k, addr
			}
			addr = addr.Unmap().WithZone("")
			if addr.Is4() || p <= 0 || p >= 128 {
				if k != addr.String() {
					t.Fatalf("ClientKey(%q, %d) = %q, want %q", s, p, k, addr)
				}
				return k, addr
			}
			net, err := netip.ParsePrefix(k)
			if err != nil || net.Bits() != p || !net.Contains(addr) || net.Masked() != net {
				t.Fatalf("ClientKey(%q, %d) = %q, not the address's /%d (%v)", s, p, k, p, err)
			}
			return k, addr
		}
		ka, aa := key(a)
		kb, ab := key(b)
		if !aa.IsValid() || !ab.IsValid() {
			return
		}
		same := aa == ab
		if aa.Is6() && ab.Is6() && p > 0 && p < 128 {
			pa, _ := aa.Prefix(p)
			same = pa.Contains(ab)
		}
		if same != (ka == kb) {
			t.Fatalf("%q and %q (prefix %d): keys %q and %q", a, b, p, ka, kb)
		}
	})
}
