package main

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/diana-gw/diana/internal/algotest"
	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
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
		return types.ErrorStatusCasMismatch
	}
	return d.hostData.Set(key, v, cas)
}

// worker is another Envoy worker thread: its own engine on the same shared data.
func worker(t *testing.T, cfg string) *rules.Engine {
	t.Helper()
	c, err := parseConfig([]byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	s := &slotStore{data: hostData{}, now: nowMicro, slots: c.slots, entries: c.slotEntries, retries: c.casRetries}
	e, err := rules.New(c.rules, rules.Options{Local: s})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func nowMicro() int64 { return 1_700_000_000 * algos.Second }

// A write by another worker between our Get and Set makes our Set fail its CAS; the retry
// decides on the other worker's state, so no admission is lost.
func TestCASRace(t *testing.T) {
	d := &casData{}
	e := start(t, &vmContext{data: d, now: nowMicro}, perIP)
	other := worker(t, perIP)
	d.armed = true
	d.race = func() {
		in := rules.Input{ClientIP: "192.0.2.1"}
		if res := other.Check(context.Background(), &in); !res.Allowed {
			t.Error("the other worker was denied")
		}
	}
	if r := e.request("/"); r.status != 0 || r.headers["ratelimit-remaining"] != "1" {
		t.Fatalf("first request: status %d, headers %v; want allowed with 1 remaining (the other worker took one)", r.status, r.headers)
	}
	if d.sets != 2 {
		t.Errorf("%d sets, want 2 (a mismatch, then the retry)", d.sets)
	}
	e.request("/")
	if r := e.request("/"); r.status != 429 {
		t.Errorf("4th admission overall: status %d, want 429", r.status)
	}
	if n := e.counter(metricCASExhausted); n != 0 {
		t.Errorf("%s = %d, want 0", metricCASExhausted, n)
	}
}

// Retries are bounded: when every Set loses, the request is decided on the last state read
// (admitted here, taking nothing) and the exhausted-retries metric counts it.
func TestCASExhausted(t *testing.T) {
	d := &casData{}
	cfg := `{"cas_retries": 3, "rules": [{"name": "one", "by": ["ip"], "limit": {"algorithm": "fixed_window", "limit": 1, "window": "1h"}}]}`
	e := start(t, &vmContext{data: d, now: nowMicro}, cfg)
	d.armed, d.mismatch = true, 2
	if r := e.request("/"); r.status != 0 {
		t.Fatalf("status %d after 2 mismatches, want allowed", r.status)
	}
	d.mismatch = -1
	d.sets = 0
	if r := e.request("/"); r.status != 429 {
		t.Fatalf("status %d, want 429 (the first admission was stored)", r.status)
	}
	if d.sets != 0 {
		t.Errorf("a denial wrote shared data %d times", d.sets)
	}
	// A new client: every set loses.
	r := e.from("192.0.2.7:1").request("/")
	if r.status != 0 {
		t.Errorf("status %d with retries exhausted, want allowed", r.status)
	}
	if d.sets != 3 {
		t.Errorf("%d sets, want 3 (cas_retries)", d.sets)
	}
	if n := e.counter(metricCASExhausted); n != 1 {
		t.Errorf("%s = %d, want 1", metricCASExhausted, n)
	}
}

// The key space is bounded: however many clients, a rule writes only its slot keys; clients
// sharing a slot keep separate counts; a full slot evicts the entry that expires first.
func TestSlots(t *testing.T) {
	d := &casData{}
	cfg := `{"slots": 4, "slot_entries": 64, "rules": [{"name": "per-ip", "by": ["ip"], "limit": {"algorithm": "fixed_window", "limit": 1, "window": "1h"}}]}`
	e := start(t, &vmContext{data: d, now: nowMicro}, cfg)
	if len(d.keys) != 4 {
		t.Fatalf("%d keys created at start, want 4: %v", len(d.keys), d.keys)
	}
	for i := 0; i < 200; i++ {
		if r := e.from("10.0.0." + strconv.Itoa(i) + ":1").request("/"); r.status != 0 && i < 200 {
			if i < 4*64 { // 200 clients fit: 4 slots × 64 entries, unless hashing is very skewed
				t.Fatalf("client %d denied on its first request", i)
			}
		}
	}
	if len(d.keys) != 4 {
		t.Errorf("%d keys after 200 clients, want 4", len(d.keys))
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

func TestSlotEviction(t *testing.T) {
	now := nowMicro()
	clock := func() int64 { return now }
	cfg := `{"slots": 1, "slot_entries": 2, "rules": [{"name": "per-ip", "by": ["ip"], "limit": {"algorithm": "fixed_window", "limit": 1, "window": "1m"}}]}`
	e := start(t, &vmContext{now: clock}, cfg)
	e.from("10.0.0.1:1").request("/")
	now += 10 * algos.Second
	e.from("10.0.0.2:1").request("/")
	if r := e.from("10.0.0.1:1").request("/"); r.status != 429 {
		t.Fatalf("10.0.0.1 again: status %d, want 429 (its entry is kept)", r.status)
	}
	// A third client evicts the entry expiring first (10.0.0.1, whose window ends first)...
	e.from("10.0.0.3:1").request("/")
	if r := e.from("10.0.0.2:1").request("/"); r.status != 429 {
		t.Errorf("10.0.0.2: status %d, want 429 (kept)", r.status)
	}
	// ...which then starts afresh: the documented leniency of a full slot.
	if r := e.from("10.0.0.1:1").request("/"); r.status != 0 {
		t.Errorf("10.0.0.1 after eviction: status %d, want allowed", r.status)
	}
	// Expired entries count as fresh and make room.
	now += 2 * algos.Minute
	for _, ip := range []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"} {
		if r := e.from(ip + ":1").request("/"); r.status != 0 {
			t.Errorf("%s after the window: status %d, want allowed", ip, r.status)
		}
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
		for i := 0; i < 3; i++ { // a per-IP rule does not apply without an address
			if r := e.from("unix:/run/envoy.sock").request("/"); r.status != 0 {
				t.Errorf("status %d", r.status)
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
		if r.headers["retry-after"] != "3600" {
			t.Errorf("retry-after %q", r.headers["retry-after"])
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
	for key := range d.keys { // another version's layout, truncated entries
		v, cas, _ := d.Get(key)
		_ = v
		d.hostData.Set(key, []byte{9, 1, 2, 3}, cas)
		break
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
	for _, body := range []string{"", "{", "[]", `{"allowed": "yes"}`, `{"allowed": false, "status": 200}`, `{"allowed": false, "status": 1e400}`, `{"allowed": true, "headers": {"a": 1}}`} {
		if _, reason := parseCheck([]byte(body)); reason == "" {
			t.Errorf("parseCheck(%q) accepted", body)
		}
	}
	if a, reason := parseCheck([]byte(`{"allowed": true, "status": 200, "future": [1, {}]}`)); reason != "" || !a.allowed {
		t.Errorf("unknown fields: %v %q", a, reason)
	}
}

// The slot store keeps a state as long as its algorithm needs it, bans included: a window
// outlives the ban it caused, and a banned client is told the real wait.
func TestSlotStoreMatchesTransition(t *testing.T) {
	start(t, &vmContext{now: nowMicro}, `{"rules": [{"name": "r", "limit": {"algorithm": "fixed_window", "limit": 1, "window": "1s"}}]}`)
	var now int64
	s := &slotStore{data: hostData{}, now: func() int64 { return now }, slots: 16, entries: 8, retries: 4}
	decide := func(key string, alg algos.Algorithm, r algos.Request) algos.Decision {
		now = r.Now
		op := &rules.Op{Key: key, Alg: alg, Req: r}
		s.Decide(context.Background(), []*rules.Op{op})
		if op.Err != nil {
			t.Fatal(op.Err)
		}
		return op.Dec
	}
	algotest.BanKeepsWindow(t, decide)
	algotest.MatchTransition(t, decide, false)
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
