package httplimit

import (
	"net/http"
	"net/netip"
	"testing"

	"github.com/diana-gw/diana/shared/rules"
)

func TestClientIP(t *testing.T) {
	trusted, err := ParsePrefixes([]string{"10.0.0.0/8", "2001:db8:ffff::/48", "192.0.2.10"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		peer   string
		xff    []string // one entry per header line
		realIP string
		want   string
	}{
		{"untrusted peer, no header", "203.0.113.5:4000", nil, "", "203.0.113.5"},
		{"untrusted peer's XFF is ignored", "203.0.113.5:4000", []string{"1.1.1.1"}, "", "203.0.113.5"},
		{"untrusted peer's X-Real-IP is ignored", "203.0.113.5:4000", nil, "1.1.1.1", "203.0.113.5"},
		{"trusted peer, one hop", "10.0.0.1:4000", []string{"1.1.1.1"}, "", "1.1.1.1"},
		{"trusted single address", "192.0.2.10:80", []string{"1.1.1.1"}, "", "1.1.1.1"},
		{"a client's forged entries left of the first untrusted hop", "10.0.0.1:4000", []string{"6.6.6.6, 1.1.1.1"}, "", "1.1.1.1"},
		{"trusted hops skipped from the right", "10.0.0.1:4000", []string{"6.6.6.6, 1.1.1.1, 10.0.0.7, 10.0.0.9"}, "", "1.1.1.1"},
		{"several header lines read as one list", "10.0.0.1:4000", []string{"6.6.6.6, 1.1.1.1", "10.0.0.7"}, "", "1.1.1.1"},
		{"garbage ends the walk at the hop that added it", "10.0.0.1:4000", []string{"not-an-ip, 10.0.0.7"}, "", "10.0.0.7"},
		{"garbage right at the peer", "10.0.0.1:4000", []string{"1.1.1.1, bogus"}, "", "10.0.0.1"},
		{"every hop trusted: the leftmost", "10.0.0.1:4000", []string{"10.1.1.1, 10.0.0.7"}, "", "10.1.1.1"},
		{"X-Real-IP from a trusted peer", "10.0.0.1:4000", nil, "1.1.1.1", "1.1.1.1"},
		{"X-Forwarded-For wins over X-Real-IP", "10.0.0.1:4000", []string{"2.2.2.2"}, "1.1.1.1", "2.2.2.2"},
		{"bad X-Real-IP: the peer", "10.0.0.1:4000", nil, "nope", "10.0.0.1"},
		{"entries with ports", "10.0.0.1:4000", []string{"1.1.1.1:5555"}, "", "1.1.1.1"},
		{"IPv6 peer", "[2001:db8::1]:4000", nil, "", "2001:db8::1"},
		{"IPv6 trusted peer and bracketed entry", "[2001:db8:ffff::1]:4000", []string{"[2001:db8:1::5]:443"}, "", "2001:db8:1::5"},
		{"IPv4-mapped IPv6 becomes IPv4", "[::ffff:10.0.0.1]:4000", []string{"::ffff:1.1.1.1"}, "", "1.1.1.1"},
		{"zone dropped", "[fe80::1%eth0]:4000", nil, "", "fe80::1"},
		{"peer without a port", "203.0.113.5", nil, "", "203.0.113.5"},
		{"unparseable peer", "@unix", []string{"1.1.1.1"}, "", "invalid IP"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &http.Request{RemoteAddr: tt.peer, Header: http.Header{}}
			for _, v := range tt.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			if tt.realIP != "" {
				r.Header.Set("X-Real-IP", tt.realIP)
			}
			if got := ClientIP(r, trusted).String(); got != tt.want {
				t.Errorf("ClientIP = %s, want %s", got, tt.want)
			}
		})
	}
}

func TestParsePrefixes(t *testing.T) {
	got, err := ParsePrefixes([]string{"10.1.2.3/8", "192.0.2.1", "::ffff:192.0.2.2", "2001:db8::/32"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"10.0.0.0/8", "192.0.2.1/32", "192.0.2.2/32", "2001:db8::/32"}
	for i, p := range got {
		if p.String() != want[i] {
			t.Errorf("prefix %d = %s, want %s", i, p, want[i])
		}
	}
	if _, err := ParsePrefixes([]string{"10.0.0.0/33"}); err == nil {
		t.Error("10.0.0.0/33 accepted")
	}
	if _, err := ParsePrefixes([]string{"example.com"}); err == nil {
		t.Error("a host name accepted")
	}
}

func TestInputIPv6Prefix(t *testing.T) {
	r := &http.Request{RemoteAddr: "[2001:db8:1:2:3:4:5:6]:80", Header: http.Header{}, Method: "GET"}
	r.URL = nil
	for _, tt := range []struct {
		bits int
		want string
	}{{0, "2001:db8:1:2::/64"}, {64, "2001:db8:1:2::/64"}, {48, "2001:db8:1::/48"}, {128, "2001:db8:1:2:3:4:5:6"}} {
		l := New(nil, Options{IPv6Prefix: tt.bits})
		o := l.state.Load().opts
		if got := rules.ClientKey(ClientIP(r, nil), o.IPv6Prefix); got != tt.want {
			t.Errorf("IPv6Prefix %d: %s, want %s", tt.bits, got, tt.want)
		}
	}
	if got := rules.ClientKey(netip.MustParseAddr("192.0.2.1"), 64); got != "192.0.2.1" {
		t.Errorf("IPv4 = %s", got)
	}
}

// Reading the client costs no allocation in the common cases: a peer with a port, and
// X-Forwarded-For entries with and without one, IPv4 and IPv6.
func TestClientIPAllocs(t *testing.T) {
	trusted, err := ParsePrefixes([]string{"10.0.0.0/8"})
	if err != nil {
		t.Fatal(err)
	}
	for _, xff := range []string{"1.1.1.1", "1.1.1.1:5555", "2001:db8::5", "[2001:db8::5]:443", "6.6.6.6, 1.1.1.1, 10.0.0.7"} {
		r := &http.Request{RemoteAddr: "10.0.0.1:4000", Header: http.Header{"X-Forwarded-For": {xff}}}
		if n := testing.AllocsPerRun(100, func() { ClientIP(r, trusted) }); n != 0 {
			t.Errorf("X-Forwarded-For %q: %v allocations, want 0", xff, n)
		}
	}
}

// client_ip_header names the one header the trusted proxy sets; the others are not read, and
// a trusted peer that sends one anyway, or omits the named one, is reported (issue 25, item 4:
// nginx setting only X-Real-IP passes the client's own X-Forwarded-For on).
func TestClientIPHeader(t *testing.T) {
	trusted, err := ParsePrefixes([]string{"10.0.0.0/8"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		h       ClientIPHeader
		peer    string
		headers http.Header
		want    string
		problem string
	}{
		{"the trap: auto reads the client's XFF, and says so", AutoIPHeader, "10.0.0.1:1",
			http.Header{"X-Real-Ip": {"1.1.1.1"}, "X-Forwarded-For": {"6.0.0.1"}}, "6.0.0.1", Disagree},
		{"auto, XFF and X-Real-IP agree", AutoIPHeader, "10.0.0.1:1",
			http.Header{"X-Real-Ip": {"1.1.1.1"}, "X-Forwarded-For": {"6.0.0.1, 1.1.1.1"}}, "1.1.1.1", ""},
		{"auto, X-Real-IP names a trusted hop: not a client's choice", AutoIPHeader, "10.0.0.1:1",
			http.Header{"X-Real-Ip": {"10.0.0.9"}, "X-Forwarded-For": {"1.1.1.1, 10.0.0.9"}}, "1.1.1.1", ""},
		{"X-Real-IP: the client's XFF is not read, and is reported", XRealIP, "10.0.0.1:1",
			http.Header{"X-Real-Ip": {"1.1.1.1"}, "X-Forwarded-For": {"6.0.0.1"}}, "1.1.1.1", "X-Forwarded-For"},
		{"X-Real-IP alone", XRealIP, "10.0.0.1:1", http.Header{"X-Real-Ip": {" 1.1.1.1 "}}, "1.1.1.1", ""},
		{"X-Real-IP missing: the peer", XRealIP, "10.0.0.1:1", http.Header{"X-Forwarded-For": {"6.0.0.1"}}, "10.0.0.1", "missing X-Real-IP"},
		{"X-Real-IP twice: the peer", XRealIP, "10.0.0.1:1", http.Header{"X-Real-Ip": {"6.0.0.1", "1.1.1.1"}}, "10.0.0.1", "missing X-Real-IP"},
		{"X-Real-IP not an address: the peer", XRealIP, "10.0.0.1:1", http.Header{"X-Real-Ip": {"x"}}, "10.0.0.1", "missing X-Real-IP"},
		{"X-Forwarded-For: X-Real-IP is not read", XForwardedFor, "10.0.0.1:1",
			http.Header{"X-Real-Ip": {"6.0.0.1"}, "X-Forwarded-For": {"1.1.1.1"}}, "1.1.1.1", "X-Real-IP"},
		{"X-Forwarded-For missing", XForwardedFor, "10.0.0.1:1", http.Header{"X-Real-Ip": {"6.0.0.1"}}, "10.0.0.1", "missing X-Forwarded-For"},
		{"Forwarded, from the right", Forwarded, "10.0.0.1:1",
			http.Header{"Forwarded": {`for=6.0.0.1, for=1.1.1.1;proto=https, for=10.0.0.7`}}, "1.1.1.1", ""},
		{"Forwarded, quoted IPv6 with port", Forwarded, "10.0.0.1:1",
			http.Header{"Forwarded": {`For="[2001:db8::17]:4711";by=10.0.0.1`}}, "2001:db8::17", ""},
		{"Forwarded, unknown ends the walk", Forwarded, "10.0.0.1:1",
			http.Header{"Forwarded": {`for=6.0.0.1, for=unknown, for=10.0.0.7`}}, "10.0.0.7", ""},
		{"Forwarded: XFF reported", Forwarded, "10.0.0.1:1",
			http.Header{"Forwarded": {`for=1.1.1.1`}, "X-Forwarded-For": {"6.0.0.1"}}, "1.1.1.1", "X-Forwarded-For"},
		{"untrusted peer: nothing read, nothing reported", XRealIP, "203.0.113.5:1",
			http.Header{"X-Real-Ip": {"1.1.1.1"}, "X-Forwarded-For": {"6.0.0.1"}}, "203.0.113.5", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var problems []string
			o := Options{TrustedProxies: trusted, ClientIPHeader: tt.h,
				AddressHeader: func(_ *http.Request, p string) { problems = append(problems, p) }}
			r := &http.Request{RemoteAddr: tt.peer, Header: tt.headers}
			if got := o.ClientIP(r).String(); got != tt.want {
				t.Errorf("ClientIP = %s, want %s", got, tt.want)
			}
			want := []string(nil)
			if tt.problem != "" {
				want = []string{tt.problem}
			}
			if len(problems) != len(want) || len(want) == 1 && problems[0] != want[0] {
				t.Errorf("reported %q, want %q", problems, want)
			}
		})
	}
}
