package httplimit_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/diana-gw/diana/httplimit"
	"github.com/diana-gw/diana/internal/algotest"
	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/memstore"
)

// hostileLimits count by every dimension a client controls; each allows 2 requests.
const hostileLimits = `[
	{"name": "per-ip", "by": ["ip"], "limit": {"algorithm": "token_bucket", "rate": 2, "period": "1h"}},
	{"name": "per-device", "by": ["device"], "limit": {"algorithm": "fixed_window", "limit": 2, "window": "1h"}},
	{"name": "per-key", "by": ["header:X-Api-Key", "path"], "limit": {"algorithm": "sliding_window", "limit": 2, "window": "1h"}},
	{"name": "per-consumer", "by": ["consumer"], "limit": {"algorithm": "sliding_log", "limit": 2, "window": "1h"}}]`

// rawRequest sends req as written on a new connection to addr and returns the response's
// status and body. The request is written while the response is read, so that a server that
// answers before reading it all (431) is heard.
func rawRequest(t *testing.T, addr, req string) (int, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	go io.WriteString(c, req) // its error shows as the response's
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("reading the response: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the body: %v", err)
	}
	return resp.StatusCode, string(b)
}

// TestHostileHeaders sends hostile requests over a real listener to the middleware and checks
// each gets a clear status (200 and 429 from the limits, 400 or 431 from net/http, never a 5xx)
// and the exact, bounded keys the rules document. net/http answers 431 itself to a header block
// over http.DefaultMaxHeaderBytes (1 MiB), before any handler runs, and 400 to NUL or control
// bytes in header values or the request line.
func TestHostileHeaders(t *testing.T) {
	var mu sync.Mutex
	var keys map[string]string // rule name → key, of the current case
	var mem *memstore.Store
	store := rules.Each(func(key string, alg algos.Algorithm, r algos.Request) algos.Decision {
		mu.Lock()
		defer mu.Unlock()
		name, _, _ := strings.Cut(key, "|")
		keys[name] = key
		return mem.Decide(key, alg, r)
	})
	trusted, err := httplimit.ParsePrefixes([]string{"127.0.0.1", "10.0.0.0/8"})
	if err != nil {
		t.Fatal(err)
	}
	l := httplimit.New(nil, httplimit.Options{})
	srv := httptest.NewServer(l.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	})))
	defer srv.Close()
	addr := srv.Listener.Addr().String()

	req := func(target string, headers ...string) string {
		return "GET " + target + " HTTP/1.1\r\nHost: example.com\r\n" + strings.Join(headers, "") + "Connection: close\r\n\r\n"
	}
	hops := make([]string, 3000)
	for i := range hops {
		hops[i] = "10.0." + itoa(i/250) + "." + itoa(i%250+1)
	}
	kb100 := strings.Repeat("v", 100<<10)
	mb2 := strings.Repeat("x", 2<<20)
	for _, tc := range []struct {
		name     string
		req      string
		statuses []int             // of the same request sent again and again
		keys     map[string]string // the keys each rule was asked for ("" for none)
	}{
		{"header block over MaxHeaderBytes", req("/", "X-Filler: "+mb2+"\r\n"), []int{431}, nil},
		{"request line over MaxHeaderBytes", req("/" + mb2), []int{431}, nil},
		{"100 KB device header", req("/", "X-Device-Id: "+kb100+"\r\n"), []int{200, 200, 429},
			map[string]string{"per-ip": "per-ip|127.0.0.1", "per-device": "per-device|%blake2s:" + hashKB100}},
		{"100 KB api key and path", req("/"+kb100, "X-Api-Key: "+kb100+"\r\n"), []int{200, 200, 429},
			map[string]string{"per-ip": "per-ip|127.0.0.1", "per-key": "per-key|%blake2s:" + hashKB100 + "|%blake2s:" + hashSlashKB100}},
		{"100 KB consumer from a trusted peer", req("/", "X-Consumer: "+kb100+"\r\n"), []int{200, 200, 429},
			map[string]string{"per-ip": "per-ip|127.0.0.1", "per-consumer": "per-consumer|%blake2s:" + hashKB100}},
		{"invalid UTF-8 in header values", req("/", "X-Api-Key: \xff\xfe|%\r\n", "X-Device-Id: \xc3\x28\r\n"), []int{200, 200, 429},
			map[string]string{"per-ip": "per-ip|127.0.0.1", "per-key": "per-key|\xff\xfe%7C%25|/", "per-device": "per-device|\xc3\x28"}},
		{"invalid UTF-8 in the path", req("/\xff\xfe", "X-Api-Key: k\r\n"), []int{200, 200, 429},
			map[string]string{"per-ip": "per-ip|127.0.0.1", "per-key": "per-key|k|/%25FF%25FE"}}, // /%FF%FE, its % escaped in the key
		{"NUL in a header value", req("/", "X-Api-Key: a\x00b\r\n"), []int{400}, nil},
		{"control byte in a header value", req("/", "X-Device-Id: a\x01b\r\n"), []int{400}, nil},
		{"NUL in the path", req("/a\x00b"), []int{400}, nil},
		{"3000 trusted X-Forwarded-For hops", req("/", "X-Forwarded-For: 203.0.113.9, "+strings.Join(hops, ", ")+"\r\n"), []int{200, 200, 429},
			map[string]string{"per-ip": "per-ip|203.0.113.9"}},
		{"3000 X-Forwarded-For header lines", req("/", "X-Forwarded-For: 203.0.113.8\r\n"+strings.Repeat("X-Forwarded-For: 10.1.1.1\r\n", 3000)), []int{200, 200, 429},
			map[string]string{"per-ip": "per-ip|203.0.113.8"}},
		{"malformed X-Forwarded-For entries", req("/", "X-Forwarded-For: 203.0.113.7, 999.1.1.1, unknown\r\n"), []int{200, 200, 429},
			map[string]string{"per-ip": "per-ip|127.0.0.1"}},
		{"X-Forwarded-For comma storm", req("/", "X-Forwarded-For: "+strings.Repeat(",", 500_000)+"\r\n"), []int{200, 200, 429},
			map[string]string{"per-ip": "per-ip|127.0.0.1"}},
		{"IPv6 with zone and port in X-Forwarded-For", req("/", "X-Forwarded-For: [fe80::1:2:3:4%eth0]:443\r\n"), []int{200, 200, 429},
			map[string]string{"per-ip": "per-ip|fe80::/64"}},
		{"IPv4-mapped IPv6 in X-Real-IP", req("/", "X-Real-IP: ::ffff:198.51.100.4\r\n"), []int{200, 200, 429},
			map[string]string{"per-ip": "per-ip|198.51.100.4"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			mem = memstore.New(memstore.Options{})
			mu.Unlock()
			l.Set(fuzzEngine(t, hostileLimits, store), httplimit.Options{TrustedProxies: trusted, ConsumerHeader: "X-Consumer"})
			for i, want := range tc.statuses {
				mu.Lock()
				keys = map[string]string{}
				mu.Unlock()
				status, body := rawRequest(t, addr, tc.req)
				if status != want {
					t.Fatalf("request %d: status %d (%.200q), want %d", i+1, status, body, want)
				}
				mu.Lock()
				got := keys
				mu.Unlock()
				for name, k := range got {
					if len(k) > maxKey {
						t.Errorf("request %d: rule %s: key of %d bytes, over %d", i+1, name, len(k), maxKey)
					}
				}
				for name, want := range tc.keys {
					if got[name] != want {
						t.Errorf("request %d: rule %s: key %.300q, want %.300q", i+1, name, got[name], want)
					}
				}
				if tc.keys == nil && len(got) > 0 {
					t.Errorf("request %d: refused by net/http, yet decided: %q", i+1, got)
				}
			}
		})
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// How a key spells a value over 128 bytes: the first 16 bytes of its BLAKE2s-256, in hex;
// these golden values were computed outside Go (Python's hashlib.blake2s).
const (
	hashKB100      = "2425d4070f2bbbfb09d9654c7d8c8130" // 100 KiB of "v"
	hashSlashKB100 = "f83981a51a24a866493782650f4fb902" // "/" and 100 KiB of "v"
)

// TestPathSpellings sends every spelling of /api/login over a real listener, each request line
// written by hand (Go's client would clean some): a rule on /api/login counts every one, per path
// as well as per client, so the limit of N holds whatever spelling the client picks. With
// escaped_slashes reject, the spellings with an escaped slash get a 400 and count for nothing.
func TestPathSpellings(t *testing.T) {
	l := httplimit.New(nil, httplimit.Options{})
	srv := httptest.NewServer(l.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	})))
	defer srv.Close()
	addr := srv.Listener.Addr().String()
	spellings := algotest.LoginSpellings
	n := len(spellings)
	limits := fmt.Sprintf(`[{"name": "login", "match": {"paths": ["/api/login"]}, "by": ["ip", "path"], "limit": {"algorithm": "fixed_window", "limit": %d, "window": "1h"}}]`, n)
	for _, slashes := range []rules.EscapedSlashes{rules.DecodeSlashes, rules.KeepSlashes, rules.RejectSlashes} {
		name := rules.EscapedSlashesNames[slashes]
		e, err := rules.New(decodeList(t, limits), rules.Options{Local: rules.Each(memstore.New(memstore.Options{}).Decide), EscapedSlashes: slashes})
		if err != nil {
			t.Fatal(err)
		}
		l.Set(e, httplimit.Options{})
		counted := 0
		for _, p := range spellings {
			status, body := rawRequest(t, addr, "GET "+p+" HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n")
			escaped := strings.Contains(strings.ToLower(p), "%2f") || strings.Contains(strings.ToLower(p), "%5c")
			switch {
			case escaped && slashes == rules.RejectSlashes:
				if status != 400 {
					t.Errorf("%s: %s: status %d (%s), want 400", name, p, status, body)
				}
			case escaped && slashes == rules.KeepSlashes:
				// /api%2Flogin is one segment: not the rule's path.
			case status != 200:
				t.Errorf("%s: %s: status %d (%s), want 200", name, p, status, body)
			default:
				counted++
			}
		}
		// Every spelling the option lets through counted against the one limit.
		status, _ := rawRequest(t, addr, "GET /api/login HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n")
		if want := 200; counted < n && status != want {
			t.Errorf("%s: after %d of %d counted spellings, /api/login got %d, want %d", name, counted, n, status, want)
		}
		if counted == n && status != 429 {
			t.Errorf("%s: after every spelling, /api/login got %d, want 429: some spelling was not counted", name, status)
		}
	}
}
