package main

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/slotstore"
)

// FuzzParseConfig: parsing any plugin configuration never panics (TinyGo has no recover: a
// panic kills the Envoy VM); an error's every line starts with "diana.wasm configuration"; a
// valid configuration keeps every field within its bounds and holds only rules the filter can
// run.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		perIP,
		`{"xff_trusted_hops": 2, "ipv6_prefix": 56, "slots": 65536, "slot_entries": 256, "cas_retries": 100, "rules": []}`,
		`{"cluster": {"name": "dianad", "path": "/v1/check", "timeout": "50ms", "token": "t", "headers": ["X-Key"], "on_failure": "local", "failure_status": 503,
			"rules": [{"name": "f", "by": ["ip"], "limit": {"algorithm": "token_bucket", "rate": 5, "period": "1s"}}]}}`,
		`{"cluster": {"name": "", "path": "v1", "on_failure": "local"}}`,
		`{"rules": [{"name": "d", "action": "delay", "max_delay": "1s", "mode": "cluster", "limit": {"algorithm": "sliding_log", "limit": 3, "window": "1m"}}]}`,
		`{"slots": 0, "slot_entries": 1e400, "xff_trusted_hops": -1, "rules": null}`,
		`{}`, `[]`, `"x"`,
		adaptiveBy(`["route"]`), adaptiveBy(`["ip"]`),
		`{"cluster": {"name": "d", "on_failure": "local", "rules": [{"name": "a", "limit": {"algorithm": "adaptive"}}]}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := parseConfig(data)
		if err != nil {
			if c != nil {
				t.Fatalf("a config with the error %v", err)
			}
			for _, line := range strings.Split(err.Error(), "\n") {
				if !strings.HasPrefix(line, "diana.wasm configuration") {
					t.Fatalf("error line %q does not name the configuration", line)
				}
			}
			return
		}
		switch {
		case c.xffHops < 0 || c.xffHops > 64, c.ipv6Prefix < 1 || c.ipv6Prefix > 128,
			c.slots < 1 || c.slots > maxSlots, c.slotEntries < 1 || c.slotEntries > maxSlotEntries,
			c.casRetries < 1 || c.casRetries > maxCASRetries:
			t.Fatalf("field out of bounds: %+v", c)
		}
		all := c.rules
		if c.cluster != nil {
			if c.cluster.name == "" || !strings.HasPrefix(c.cluster.path, "/") || c.cluster.timeoutMS == 0 ||
				c.cluster.onFailure == rules.FailLocal && len(c.cluster.rules) == 0 {
				t.Fatalf("cluster config %+v", c.cluster)
			}
			all = append(all[:len(all):len(all)], c.cluster.rules...)
		}
		for i, r := range all {
			if r.Alg == nil || r.Mode != rules.Local || r.Action == rules.Delay {
				t.Fatalf("rule %s the filter cannot run: %+v", r.Name, r)
			}
			// A list state only for adaptive, in the top-level rules, counted by what
			// configuration bounds.
			if r.Alg.Script().Log && (!r.Learns || i >= len(c.rules) || slices.ContainsFunc(r.By, func(by string) bool { return !bounded(by) })) {
				t.Fatalf("rule %s keeps a list state the filter cannot bound: %+v", r.Name, r)
			}
		}
	})
}

// refClientAddr is clientAddr's documentation as code: the hops-th entry from the right of
// X-Forwarded-For if there is one and it is an address, else source.address without its port.
func refClientAddr(source, xff string, hops int) netip.Addr {
	if entries := strings.Split(xff, ","); hops > 0 && xff != "" && hops <= len(entries) {
		if a, err := netip.ParseAddr(strings.TrimSpace(entries[len(entries)-hops])); err == nil {
			return a
		}
	}
	if ap, err := netip.ParseAddrPort(source); err == nil {
		return ap.Addr()
	}
	a, _ := netip.ParseAddr(source)
	return a
}

// FuzzClientAddr: clientAddr agrees with its documentation, and the entries left of the one it
// reads (which a client can forge) never change its answer.
func FuzzClientAddr(f *testing.F) {
	f.Add("192.0.2.1:40000", "198.51.100.1, 10.0.0.1", "203.0.113.66", uint8(2))
	f.Add("[2001:db8::1]:443", "2001:db8::2,fe80::1%eth0", "", uint8(1))
	f.Add("garbage", ",,,, ,", "x", uint8(64))
	f.Add("::ffff:192.0.2.1", strings.Repeat("1.1.1.1,", 2000), "", uint8(3))
	f.Add("", "\x00\xff", "\n", uint8(0))
	f.Fuzz(func(t *testing.T, source, xff, forged string, hops uint8) {
		h := int(hops) % 66
		got := clientAddr([]byte(source), xff, h)
		if want := refClientAddr(source, xff, h); got != want {
			t.Fatalf("clientAddr(%q, %q, %d) = %v, want %v", source, xff, h, got, want)
		}
		if entries := strings.Split(xff, ","); h > 0 && xff != "" && h <= len(entries) {
			if again := clientAddr([]byte(source), forged+","+xff, h); again != got {
				t.Fatalf("X-Forwarded-For %q gives %v, with %q left of it %v", xff, got, forged, again)
			}
		}
	})
}

// fuzzFilter is the configuration of FuzzRequest: small limits and few, small slots, so that
// denials and full slots come up, by every dimension a client controls.
const fuzzFilter = `{"xff_trusted_hops": 1, "slots": 4, "slot_entries": 2, "rules": [
	{"name": "a", "by": ["ip"], "limit": {"algorithm": "fixed_window", "limit": 2, "window": "1h"}},
	{"name": "b", "by": ["header:X-Key", "path"], "limit": {"algorithm": "token_bucket", "rate": 2, "period": "1h"}},
	{"name": "c", "by": ["device", "host", "method"], "action": "shadow", "limit": {"algorithm": "sliding_window", "limit": 1, "window": "1h"}},
	{"name": "d", "by": ["route"], "limit": {"algorithm": "adaptive", "slo": "1s", "min_limit": 1, "max_limit": 1}}]}`

// FuzzRequest runs the filter in Go under the SDK's emulator with any request: it never panics,
// either lets the request through or answers 429 with the JSON body, counts it once, and its
// shared data stays within the documented bound: rules × slots keys of at most
// slotstore.SlotBytes(entries) bytes, the hash key, and for the adaptive rule (by route, which
// the emulator leaves unnamed) one key of at most 1 KB. Each request ends, so the adaptive
// limit of 1 never denies.
func FuzzRequest(f *testing.F) {
	big := strings.Repeat("x|%", 40_000)
	f.Add("GET", "/a?b=c", "example.com", "192.0.2.1:40000", "198.51.100.7, 10.0.0.1", "key", "dev")
	f.Add("POST", "/"+big, big, "[::1]:99999", big, big, big)
	f.Add("\x00", "", "", "", ",,,, ,", "\x00\xff", "\r\n")
	f.Add("get", "/\xc3\x28", "EXAMPLE.COM.:80", "fe80::1%eth0", "fe80::1%eth0", "", "")
	d := &casData{}
	host := start(f, &vmContext{data: d, now: nowMicro}, fuzzFilter)
	f.Fuzz(func(t *testing.T, method, path, authority, source, xff, key, device string) {
		e := &emu{host.HostEmulator, t}
		if source != "" { // Envoy always has one; the emulator refuses an empty property
			e.from(source)
		}
		before := e.counter(metricAllowed) + e.counter(metricDenied)
		id := e.InitializeHttpContext()
		hdrs := [][2]string{{":method", method}, {":path", path}, {":authority", authority},
			{"x-forwarded-for", xff}, {"x-key", key}, {"x-device-id", device}}
		r := e.finish(result{id: id, action: e.CallOnRequestHeaders(id, hdrs, true)})
		switch r.status {
		case 0:
		case 429:
			if !strings.HasPrefix(r.body, `{"message":"API rate limit exceeded","retry_after":`) {
				t.Fatalf("429 body %q", r.body)
			}
		case 400: // only for a path with a control character, raw or escaped (before any query)
			if !controlInPath(path) || r.body != string(rules.DenialBody(rules.BadPathMessage, -1)) {
				t.Fatalf("path %q: status 400, body %q", path, r.body)
			}
		default:
			t.Fatalf("status %d, body %q", r.status, r.body)
		}
		if n := e.counter(metricAllowed) + e.counter(metricDenied); n != before+1 {
			t.Fatalf("the request counted %d times", n-before)
		}
		if len(d.keys) > 3*4+1+1 {
			t.Fatalf("%d shared-data keys, over rules × slots = 12, the hash key and the adaptive state", len(d.keys))
		}
		for k := range d.keys {
			v, _, err := d.hostData.Get(k)
			switch {
			case err != nil:
				t.Fatalf("key %s: %v", k, err)
			case strings.HasPrefix(k, "diana/a/"):
				if k != "diana/a/1/adaptive/d|%none" || len(v) > 1024 {
					t.Fatalf("adaptive state %s: %d bytes, want the one of unnamed routes, at most 1 KB", k, len(v))
				}
			case k != slotstore.KeyName && len(v) > slotstore.SlotBytes(2):
				t.Fatalf("slot %s: %d bytes, over %d", k, len(v), slotstore.SlotBytes(2))
			}
		}
	})
}

// controlInPath reports whether the path of target (before any query or fragment) holds a
// control character, raw or as an escape (%00-%1F, %7F).
func controlInPath(target string) bool {
	p, _, _ := strings.Cut(target, "?")
	p, _, _ = strings.Cut(p, "#")
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c == '%' && i+2 < len(p) {
			if v, err := strconv.ParseUint(p[i+1:i+3], 16, 8); err == nil {
				c, i = byte(v), i+2
			}
		}
		if c < ' ' || c == 0x7f {
			return true
		}
	}
	return false
}
