package httplimit_test

import (
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/diana-gw/diana/httplimit"
	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/conf"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/memstore"
)

// fuzzProxies are the trusted proxies FuzzClientIP picks from, one bit of its selector each.
var fuzzProxies = []string{"10.0.0.0/8", "192.0.2.0/24", "2001:db8::/32", "127.0.0.1"}

// refAddr reads an address as ClientIP documents: with or without a port, IPv4-mapped IPv6 as
// IPv4, without zone.
func refAddr(s string) netip.Addr {
	if ap, err := netip.ParseAddrPort(s); err == nil { // "[::%]]:8" too: a zone may hold ']'
		return ap.Addr().Unmap().WithZone("")
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		host, _, err := net.SplitHostPort(s)
		if err != nil {
			return netip.Addr{}
		}
		if a, err = netip.ParseAddr(host); err != nil {
			return netip.Addr{}
		}
	}
	return a.Unmap().WithZone("")
}

// refClientIP is ClientIP's documentation as code: an untrusted (or unreadable) peer is the
// client; a trusted peer's X-Forwarded-For hops are read from the right, over every header line,
// up to the first untrusted one, an unreadable hop ending the walk at the hop that added it;
// without X-Forwarded-For, a trusted peer's X-Real-IP is the client.
func refClientIP(remote string, xff []string, realIP string, trusted []netip.Prefix) netip.Addr {
	isTrusted := func(a netip.Addr) bool {
		for _, p := range trusted {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	peer := refAddr(remote)
	if !peer.IsValid() || !isTrusted(peer) {
		return peer
	}
	var hops []string
	for _, line := range xff {
		if line != "" {
			hops = append(hops, strings.Split(line, ",")...)
		}
	}
	client := peer
	for i := len(hops) - 1; i >= 0; i-- {
		a := refAddr(strings.TrimSpace(hops[i]))
		if !a.IsValid() {
			return client
		}
		client = a
		if !isTrusted(a) {
			return a
		}
	}
	if len(xff) == 0 {
		if a := refAddr(strings.TrimSpace(realIP)); a.IsValid() {
			return a
		}
	}
	return client
}

// FuzzClientIP: ClientIP agrees with its documentation (refClientIP); it is invalid only when
// RemoteAddr is, never zoned nor IPv4-mapped; anything a client writes left of the first
// untrusted hop changes nothing; Input believes the consumer header only from a trusted peer
// and counts the client by rules.ClientKey.
func FuzzClientIP(f *testing.F) {
	f.Add("10.0.0.1:1234", "198.51.100.7, 10.0.0.2", "", "", "spoofed", "acct", uint8(0x11))
	f.Add("[2001:db8::1]:443", "[2001:db8::2]:80,2001:db8::3", "::ffff:192.0.2.5", "203.0.113.9", "1.1.1.1", "", uint8(0x34))
	f.Add("127.0.0.1:80", "", "", " 203.0.113.9 ", "", "x", uint8(0x08))
	f.Add("[fe80::1%eth0]:80", ",,,,", "unknown, 10.1.1.1", "", ",", "", uint8(0x3f))
	f.Add("192.0.2.1:1", strings.Repeat("10.0.0.1,", 1000), "", "", "", "", uint8(0x13))
	f.Add("garbage", "\x00", "\xff", "\n", "", "", uint8(0xff))
	f.Fuzz(func(t *testing.T, remote, xff1, xff2, realIP, junk, consumer string, sel uint8) {
		var list []string
		for i, p := range fuzzProxies {
			if sel&(1<<i) != 0 {
				list = append(list, p)
			}
		}
		trusted, err := httplimit.ParsePrefixes(list)
		if err != nil {
			t.Fatal(err)
		}
		var xff []string
		if sel&0x10 != 0 {
			xff = append(xff, xff1)
		}
		if sel&0x20 != 0 {
			xff = append(xff, xff2)
		}
		req := func(xff []string) *http.Request {
			h := http.Header{}
			for _, v := range xff {
				h.Add("X-Forwarded-For", v)
			}
			if realIP != "" {
				h.Set("X-Real-IP", realIP)
			}
			h.Set("X-Consumer", consumer)
			return &http.Request{Method: "GET", URL: &url.URL{Path: "/"}, RemoteAddr: remote, Header: h}
		}
		r := req(xff)
		got := httplimit.ClientIP(r, trusted)
		if want := refClientIP(remote, xff, realIP, trusted); got != want {
			t.Fatalf("ClientIP = %v, want %v", got, want)
		}
		if got.IsValid() != refAddr(remote).IsValid() || got.Zone() != "" || got.Is4In6() {
			t.Fatalf("ClientIP = %v (peer %q)", got, remote)
		}
		if len(xff) > 0 && got.IsValid() && !slicesContain(trusted, got) {
			// The walk stopped at got: a client's forgery further left is never read.
			forged := append([]string{junk + "," + xff[0]}, xff[1:]...)
			if again := httplimit.ClientIP(req(forged), trusted); again != got {
				t.Fatalf("X-Forwarded-For %q gives %v, with %q left of it %v", xff, got, junk, again)
			}
		}
		o := httplimit.Options{TrustedProxies: trusted, IPv6Prefix: 64, ConsumerHeader: "X-Consumer"}
		in := o.Input(r)
		if in.ClientIP != rules.ClientKey(got, 64) {
			t.Fatalf("Input's client %q, want %q", in.ClientIP, rules.ClientKey(got, 64))
		}
		peer := refAddr(remote)
		if in.Consumer != "" && (!peer.IsValid() || !slicesContain(trusted, peer)) {
			t.Fatalf("consumer %q believed from the untrusted peer %q", in.Consumer, remote)
		}
	})
}

func slicesContain(list []netip.Prefix, a netip.Addr) bool {
	for _, p := range list {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// fuzzLimits are the rules of FuzzHandler: small limits, so that both outcomes come up, by
// every dimension a client controls.
const fuzzLimits = `[
	{"name": "per-ip", "by": ["ip"], "limit": {"algorithm": "token_bucket", "rate": 3, "period": "1h"}},
	{"name": "per-key", "by": ["header:X-Api-Key", "path"], "limit": {"algorithm": "fixed_window", "limit": 2, "window": "1h"}},
	{"name": "per-device", "by": ["device", "host"], "match": {"methods": ["GET", "POST"]}, "limit": {"algorithm": "sliding_window", "limit": 2, "window": "1h"}},
	{"name": "per-consumer", "by": ["consumer", "method"], "limit": {"algorithm": "sliding_log", "limit": 2, "window": "1h"}}]`

// maxKey bounds the keys of fuzzLimits: a name, then up to two parts of at most 1 + 3 × 128
// bytes each (every byte a '|' or '%', escaped).
const maxKey = 64 + 2*(1+3*128)

// FuzzHandler: any request through the middleware gets 200 or 429, or 400 for a path with a
// control character (never another status, never a panic), with well-formed rate-limit headers, a JSON body on a denial, and store keys of
// bounded size.
func FuzzHandler(f *testing.F) {
	f.Add("GET", "/a", "example.com", "10.0.0.1:1", "192.0.2.1", "key", "dev", "acct")
	f.Add("POST", "/"+strings.Repeat("|%", 200), "EXAMPLE.com:80", "[::1]:8080", "::1%lo", strings.Repeat("k", 100_000), "\x00\xff", "")
	f.Add("\x00", "", "", "", "", "", "", "")
	f.Add("GET", "/\xc3\x28", "\xff", "10.9.9.9:9", strings.Repeat(",", 5000), "\r\n", "\t", "\x7f")
	mem := memstore.New(memstore.Options{MaxEntries: 4096})
	var longest int
	store := rules.Each(func(key string, alg algos.Algorithm, r algos.Request) algos.Decision {
		longest = max(longest, len(key))
		return mem.Decide(key, alg, r)
	})
	e := fuzzEngine(f, fuzzLimits, store)
	trusted, _ := httplimit.ParsePrefixes([]string{"10.0.0.0/8", "::1"})
	l := httplimit.New(e, httplimit.Options{TrustedProxies: trusted, ConsumerHeader: "X-Consumer"})
	h := l.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	f.Fuzz(func(t *testing.T, method, path, host, remote, xff, apiKey, device, consumer string) {
		longest = 0
		hdr := http.Header{"X-Forwarded-For": {xff}, "X-Api-Key": {apiKey}, "X-Device-Id": {device}, "X-Consumer": {consumer}}
		r := &http.Request{Method: method, URL: &url.URL{Path: path}, Host: host, RemoteAddr: remote, Header: hdr}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		// A control character in the path is refused with 400 (rules.NormalPath), and only it.
		control := strings.ContainsFunc(path, func(c rune) bool { return c < ' ' || c == 0x7f })
		if control || w.Code == http.StatusBadRequest {
			if want := string(rules.DenialBody(rules.BadPathMessage, -1)); !control || w.Code != http.StatusBadRequest || w.Body.String() != want {
				t.Fatalf("path %q: status %d, body %q", path, w.Code, w.Body.String())
			}
			return
		}
		checkReply(t, w.Code, w.Header(), w.Body.String())
		if longest > maxKey {
			t.Fatalf("a key of %d bytes, over %d", longest, maxKey)
		}
	})
}

// checkReply checks a reply of the middleware: 200 from the handler, or a 429 denial with its
// JSON body; numeric rate-limit headers.
func checkReply(t testing.TB, status int, h http.Header, body string) {
	t.Helper()
	switch status {
	case http.StatusOK:
		if body != "ok" {
			t.Fatalf("200 with body %q", body)
		}
	case http.StatusTooManyRequests:
		var b struct {
			Message    string `json:"message"`
			RetryAfter *int64 `json:"retry_after"`
		}
		if err := json.Unmarshal([]byte(body), &b); err != nil || b.Message == "" {
			t.Fatalf("429 body %q (%v)", body, err)
		}
		if ra := h.Get("Retry-After"); !digits(ra) {
			t.Fatalf("Retry-After %q", ra)
		}
	default:
		t.Fatalf("status %d, body %q", status, body)
	}
	for _, name := range []string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"} {
		if v := h.Get(name); v != "" && !digits(v) {
			t.Fatalf("%s: %q", name, v)
		}
	}
}

func digits(s string) bool {
	_, err := strconv.ParseUint(s, 10, 63)
	return err == nil
}

// decodeList decodes a JSON list of valid rules.
func decodeList(tb testing.TB, rulesJSON string) []*rules.Rule {
	tb.Helper()
	doc, err := conf.ParseJSON([]byte(`{"rules":` + rulesJSON + `}`))
	if err != nil {
		tb.Fatal(err)
	}
	errs := &conf.Errors{Source: "test"}
	rs := rules.Decode(conf.Read(doc, errs))
	if err := errs.Err(); err != nil {
		tb.Fatal(err)
	}
	return rs
}

// fuzzEngine builds a local-mode engine of rulesJSON on store.
func fuzzEngine(tb testing.TB, rulesJSON string, store rules.Store) *rules.Engine {
	tb.Helper()
	rs := decodeList(tb, rulesJSON)
	e, err := rules.New(rs, rules.Options{Local: store})
	if err != nil {
		tb.Fatal(err)
	}
	return e
}
