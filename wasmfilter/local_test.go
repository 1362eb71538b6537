package main

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/diana-gw/diana/internal/algotest"
	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/store/slotstore"
)

// casData wraps the host's shared data: it can run another worker's write between a Get and
// the following Set (a real lost race), fail Sets with a CAS mismatch, and records the keys.
type casData struct {
	hostData
	armed    bool
	race     func() // run once before the next Set, then cleared
	mismatch int    // Sets to fail with a CAS mismatch; -1: all
	sets     int
	keys     map[string]bool
	getErr   error // if set, every Get of a slot fails with it
}

func (d *casData) Get(key string) ([]byte, uint32, error) {
	if d.getErr != nil && key != slotstore.KeyName {
		return nil, 0, d.getErr
	}
	return d.hostData.Get(key)
}

func (d *casData) Set(key string, v []byte, cas uint32) error {
	if d.keys == nil {
		d.keys = map[string]bool{}
	}
	d.keys[key] = true
	if !d.armed {
		return d.hostData.Set(key, v, cas)
	}
	d.sets++
	if r := d.race; r != nil {
		d.race = nil
		r()
	}
	if d.mismatch != 0 {
		if d.mismatch > 0 {
			d.mismatch--
		}
		return slotstore.ErrCasMismatch
	}
	return d.hostData.Set(key, v, cas)
}

func nowMicro() int64 { return 1_700_000_000 * algos.Second }

// Retries are bounded: when every Set loses, the request is denied (an admission that cannot be
// stored would be free) and the exhausted-retries metric counts it. (In Go: the compiled
// module's shared data is the emulator's, which never loses a race.)
func TestCASExhausted(t *testing.T) {
	d := &casData{}
	cfg := `{"slots": 1, "cas_retries": 3, "rules": [{"name": "one", "by": ["ip"], "limit": {"algorithm": "fixed_window", "limit": 1, "window": "1h"}}]}`
	e := start(t, &vmContext{data: d, now: nowMicro}, cfg)
	if r := e.request("/"); r.status != 0 { // creates the slot
		t.Fatalf("first request: status %d", r.status)
	}
	d.armed, d.mismatch = true, -1
	if r := e.from("192.0.2.7:1").request("/"); r.status != 429 {
		t.Errorf("status %d with retries exhausted, want 429", r.status)
	}
	if d.sets != 3 {
		t.Errorf("%d sets, want 3 (cas_retries)", d.sets)
	}
	if n := e.counter(metricCASExhausted); n != 1 {
		t.Errorf("%s = %d, want 1", metricCASExhausted, n)
	}
}

// The key space is bounded and created as used: however many clients, a rule writes only its
// slot keys, none at start; clients sharing a slot keep separate counts.
func TestSlots(t *testing.T) {
	d := &casData{}
	// The hash key is random, so the clients fall in the slots at random: 50 a slot expected,
	// standard deviation 6. A slot of 64 overflowed in about one run in 25; 128 is 13 standard
	// deviations away.
	cfg := `{"slots": 4, "slot_entries": 128, "rules": [{"name": "per-ip", "by": ["ip"], "limit": {"algorithm": "fixed_window", "limit": 1, "window": "1h"}}]}`
	e := start(t, &vmContext{data: d, now: nowMicro}, cfg)
	if len(d.keys) != 1 || !d.keys[slotstore.KeyName] {
		t.Fatalf("keys written at start: %v, want only the hash key", d.keys)
	}
	for i := 0; i < 200; i++ {
		if r := e.from("10.0.0." + strconv.Itoa(i) + ":1").request("/"); r.status != 0 {
			t.Fatalf("client %d denied on its first request", i) // 200 clients fit in 4 × 128 entries
		}
	}
	if len(d.keys) != 5 {
		t.Errorf("%d keys after 200 clients, want the 4 slots and the hash key", len(d.keys))
	}
	denied := 0
	for i := 0; i < 200; i++ {
		if r := e.from("10.0.0." + strconv.Itoa(i) + ":1").request("/"); r.status == 429 {
			denied++
		}
	}
	if denied != 200 {
		t.Errorf("%d of 200 clients denied on their second request, want all", denied)
	}
}

// The attack that passed 510 of 510 requests where a per-IP limit allowed 85: clients whose
// addresses share a slot. The attacker here knows the hash key (read from shared data, as no
// attacker can) and picks 100 addresses in one slot of 4 entries; each still gets at most the
// limit, and all together at most 5 clients' worth. In Go and compiled.
func TestCollidingClients(t *testing.T) {
	const limit, entries, n = 5, 4, 100
	cfg := `{"slots": 64, "slot_entries": 4, "rules": [{"name": "per-ip", "by": ["ip"], "limit": {"algorithm": "fixed_window", "limit": 5, "window": "1h"}}]}`
	for _, rn := range runners {
		t.Run(rn.name, func(t *testing.T) {
			e := start(t, rn.vm(t), cfg)
			key, err := slotstore.LoadKey(hostData{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			s := &slotstore.Store{Key: key}
			var ips []string
			for i := 0; len(ips) < n; i++ {
				ip := "10." + strconv.Itoa(i/65536) + "." + strconv.Itoa(i/256%256) + "." + strconv.Itoa(i%256)
				if s.Hash("per-ip|"+ip)%64 == 9 {
					ips = append(ips, ip)
				}
			}
			total := 0
			for round := 0; round < 2*limit; round++ {
				for _, ip := range ips {
					if r := e.from(ip + ":1").request("/"); r.status == 0 {
						total++
					}
				}
			}
			if total > (entries+1)*limit || total < limit {
				t.Errorf("%d clients in one slot: %d admitted, want %d to %d", n, total, limit, (entries+1)*limit)
			}
			if e.counter(metricOverflow) == 0 {
				t.Errorf("%s = 0", metricOverflow)
			}
			t.Logf("%d clients in one slot: %d admitted of %d requests (per-IP limit %d)", n, total, 2*limit*n, limit)
		})
	}
}

// Churn: 5,000 clients, more than slots × entries, each trying 3 times a limit of 2 per hour:
// no client gets more than 2, in Go and compiled.
func TestChurnCompiled(t *testing.T) {
	cfg := `{"slots": 16, "slot_entries": 8, "rules": [{"name": "per-ip", "by": ["ip"], "limit": {"algorithm": "token_bucket", "rate": 2, "period": "1h"}}]}`
	for _, rn := range runners {
		t.Run(rn.name, func(t *testing.T) {
			e := start(t, rn.vm(t), cfg)
			got := map[int]int{}
			for round := 0; round < 3; round++ {
				for i := 0; i < 5000; i++ {
					c := (i*7919 + round*104729) % 5000 // another order each round
					if r := e.from("10." + strconv.Itoa(c/256) + "." + strconv.Itoa(c%256) + ".1:1").request("/"); r.status == 0 {
						got[c]++
					}
				}
			}
			total := 0
			for c, n := range got {
				total += n
				if n > 2 {
					t.Fatalf("client %d admitted %d times, limit 2", c, n)
				}
			}
			if max := 16 * (8 + 1) * 2; total > max {
				t.Errorf("%d admitted in all, over slots × (entries + 1) × 2 = %d", total, max)
			}
			t.Logf("5,000 clients × 3 requests: %d admitted", total)
		})
	}
}

// X-Forwarded-For counts only with trusted hops; IPv6 clients count by their /64.
func TestClientIdentity(t *testing.T) {
	one := func(extra string) string {
		return `{` + extra + `"rules": [{"name": "per-ip", "by": ["ip"], "limit": {"algorithm": "fixed_window", "limit": 1, "window": "1h"}}]}`
	}
	t.Run("xff untrusted", func(t *testing.T) {
		e := start(t, &vmContext{}, one(""))
		e.request("/", "x-forwarded-for", "203.0.113.1")
		if r := e.request("/", "x-forwarded-for", "203.0.113.2"); r.status != 429 {
			t.Errorf("a new XFF evaded the limit: status %d", r.status)
		}
	})
	t.Run("xff one hop", func(t *testing.T) {
		e := start(t, &vmContext{}, one(`"xff_trusted_hops": 1, `))
		e.request("/", "x-forwarded-for", "203.0.113.1")
		if r := e.request("/", "x-forwarded-for", "6.6.6.6, 203.0.113.1"); r.status != 429 {
			t.Errorf("a forged XFF entry evaded the limit: status %d", r.status)
		}
		if r := e.request("/", "x-forwarded-for", "203.0.113.2"); r.status != 0 {
			t.Errorf("another client behind the proxy: status %d", r.status)
		}
	})
	t.Run("ipv6 prefix", func(t *testing.T) {
		e := start(t, &vmContext{}, one(""))
		e.from("[2001:db8:1:2::1]:1").request("/")
		if r := e.from("[2001:db8:1:2::ffff]:1").request("/"); r.status != 429 {
			t.Errorf("same /64: status %d, want 429", r.status)
		}
		if r := e.from("[2001:db8:1:3::1]:1").request("/"); r.status != 0 {
			t.Errorf("another /64: status %d, want allowed", r.status)
		}
	})
	t.Run("no address", func(t *testing.T) {
		e := start(t, &vmContext{}, one(""))
		// Requests without an address share one count: they are limited, never let through.
		if r := e.from("unix:/run/envoy.sock").request("/"); r.status != 0 {
			t.Errorf("first request without an address: status %d, want allowed", r.status)
		}
		for i := 0; i < 2; i++ {
			if r := e.from("unix:/run/other.sock").request("/"); r.status != 429 {
				t.Errorf("later request without an address: status %d, want 429", r.status)
			}
		}
	})
}

// Shadow rules never deny but count; reply options shape the denial.
func TestShadowAndReply(t *testing.T) {
	t.Run("shadow", func(t *testing.T) {
		e := start(t, &vmContext{}, `{"rules": [{"name": "s", "action": "shadow", "limit": {"algorithm": "fixed_window", "limit": 1, "window": "1h"}}]}`)
		for i := 0; i < 3; i++ {
			if r := e.request("/"); r.status != 0 {
				t.Fatalf("shadow rule denied: %d", r.status)
			}
		}
		if a, s, d := e.counter(metricAllowed), e.counter(metricShadowDenied), e.counter(metricDenied); a != 3 || s != 2 || d != 0 {
			t.Errorf("allowed %d shadow_denied %d denied %d, want 3 2 0", a, s, d)
		}
	})
	t.Run("reply", func(t *testing.T) {
		e := start(t, &vmContext{}, `{"rules": [{"name": "r", "match": {"paths": ["/api/**"]},
			"limit": {"algorithm": "token_bucket", "rate": 1, "period": "1h"},
			"reply": {"status": 503, "message": "slow \"down\"\n", "legacy_headers": true}}]}`)
		if r := e.request("/other"); r.status != 0 || r.headers["ratelimit-limit"] != "" {
			t.Errorf("unmatched path: status %d headers %v", r.status, r.headers)
		}
		if r := e.request("/api/x"); r.headers["x-ratelimit-limit"] != "1" || r.headers["x-ratelimit-remaining"] != "0" {
			t.Errorf("legacy headers missing: %v", r.headers)
		}
		r := e.request("/api/x")
		if r.status != 503 || r.body != `{"message":"slow \"down\"\u000a","retry_after":3600}`+"\n" {
			t.Errorf("denial %d %q", r.status, r.body)
		}
		if r.headers["retry-after"] != "3600" || r.headers["x-envoy-ratelimited"] != "true" {
			t.Errorf("retry-after %q, x-envoy-ratelimited %q", r.headers["retry-after"], r.headers["x-envoy-ratelimited"])
		}
	})
	t.Run("no headers", func(t *testing.T) {
		e := start(t, &vmContext{}, `{"rules": [{"name": "r", "limit": {"algorithm": "fixed_window", "limit": 1, "window": "1h"}, "reply": {"headers": false}}]}`)
		if r := e.request("/"); len(r.headers) != 0 {
			t.Errorf("headers %v", r.headers)
		}
		if r := e.request("/"); r.status != 429 || r.headers["retry-after"] != "" {
			t.Errorf("denial %d %v", r.status, r.headers)
		}
	})
}

// Hostile or odd input never panics (TinyGo has no recover): odd headers and addresses, and
// shared-data slots holding garbage.
func TestOddInput(t *testing.T) {
	cfg := `{"xff_trusted_hops": 2, "rules": [
		{"name": "a", "by": ["ip", "header:X-Key", "path"], "limit": {"algorithm": "fixed_window", "limit": 2, "window": "1h"}},
		{"name": "b", "by": ["host", "method"], "limit": {"algorithm": "token_bucket", "rate": 100, "period": "1s"}}]}`
	d := &casData{}
	e := start(t, &vmContext{data: d}, cfg)
	e.request("/", "x-key", "k") // creates slots
	for key := range d.keys {    // another version's layout, truncated entries
		if key != slotstore.KeyName {
			_, cas, _ := d.Get(key)
			d.hostData.Set(key, []byte{9, 1, 2, 3}, cas)
		}
	}
	big := strings.Repeat("x|%", 100000)
	for _, src := range []string{"::", "[::1]:99999", "1.2.3.4:", "garbage", big} {
		e.from(src)
		for _, h := range [][]string{
			nil,
			{"x-key", big, "x-forwarded-for", big},
			{"x-forwarded-for", ",,, , ,"},
			{"x-forwarded-for", "1.1.1.1, 2.2.2.2, 3.3.3.3"},
			{"x-key", "\x00\xff"},
		} {
			e.request("/"+big, h...)
			e.request("", h...)
		}
	}
}

// Every spelling of /api/login counts against a rule on /api/login, in Go and in the compiled
// diana.wasm; with escaped_slashes reject, a spelling with an escaped slash is refused with 400.
func TestPathSpellings(t *testing.T) {
	n := len(algotest.LoginSpellings)
	for _, rn := range runners {
		for _, slashes := range []string{"decode", "reject"} {
			t.Run(rn.name+"/"+slashes, func(t *testing.T) {
				e := start(t, rn.vm(t), `{"escaped_slashes": "`+slashes+`", "rules": [{"name": "login", "match": {"paths": ["/api/login"]},
					"by": ["ip", "path"], "limit": {"algorithm": "fixed_window", "limit": `+strconv.Itoa(n)+`, "window": "1h"}}]}`)
				e.from("192.0.2.7:1")
				counted := 0
				for _, p := range algotest.LoginSpellings {
					r := e.request(p)
					escaped := strings.Contains(strings.ToLower(p), "%2f") || strings.Contains(strings.ToLower(p), "%5c")
					switch {
					case escaped && slashes == "reject":
						if r.status != 400 {
							t.Errorf("%s: status %d, want 400", p, r.status)
						}
					case r.status != 0:
						t.Errorf("%s: status %d before the limit", p, r.status)
					default:
						counted++
					}
				}
				r := e.request("/api/login")
				if counted == n && r.status != 429 {
					t.Errorf("after every spelling, /api/login got %d, want 429: a spelling was not counted", r.status)
				}
				if counted < n && r.status != 0 {
					t.Errorf("after %d of %d spellings counted, /api/login got %d", counted, n, r.status)
				}
			})
		}
	}
}

// Shared data that fails lets the request through the rule (a limiter must not take the
// gateway down), and says so: a metric, and a warning summarised per tick.
func TestSharedDataFails(t *testing.T) {
	d := &casData{}
	e := start(t, &vmContext{data: d, now: nowMicro}, perIP)
	warns := warnings(t)
	d.getErr = errors.New("host refused")
	for i := 0; i < 5; i++ {
		if r := e.request("/"); r.status != 0 {
			t.Fatalf("request %d: status %d, want let through", i, r.status)
		}
	}
	if n := e.counter(metricDataErrors); n != 5 {
		t.Errorf("%s = %d, want 5", metricDataErrors, n)
	}
	e.Tick()
	if w := warns(); len(w) != 2 || !strings.Contains(w[0], `shared data failed, the rule let the request through: rule "per-ip", client 192.0.2.1: host refused`) ||
		!strings.Contains(w[1], "4 more") {
		t.Errorf("warnings %q; want the first failure, then a summary of 4", w)
	}
}
