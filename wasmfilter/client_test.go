package main

import (
	"testing"

	"github.com/diana-gw/diana/shared/rules"
)

func TestClientAddr(t *testing.T) {
	for _, tc := range []struct {
		src, xff string
		hops     int
		want     string
	}{
		{"192.0.2.1:1234", "", 0, "192.0.2.1"},
		{"[2001:db8::1]:1234", "", 0, "2001:db8::1"},
		{"192.0.2.1", "", 0, "192.0.2.1"},
		{"192.0.2.1:1234", "203.0.113.9", 0, "192.0.2.1"}, // XFF not trusted
		{"192.0.2.1:1234", "203.0.113.9", 1, "203.0.113.9"},
		{"192.0.2.1:1234", "6.6.6.6, 203.0.113.9", 1, "203.0.113.9"}, // the forged entry is ignored
		{"192.0.2.1:1234", "6.6.6.6,203.0.113.9 , 10.0.0.1", 2, "203.0.113.9"},
		{"192.0.2.1:1234", "203.0.113.9", 2, "192.0.2.1"}, // fewer entries than hops
		{"192.0.2.1:1234", "garbage, x", 1, "192.0.2.1"},  // not an address
		{"192.0.2.1:1234", ",,,", 3, "192.0.2.1"},         //
		{"nonsense", "", 0, "invalid IP"},                 //
		{"", "", 0, "invalid IP"},                         //
		{"[fe80::1%eth0]:80", "", 0, "fe80::1%eth0"},      //
		{"::ffff:192.0.2.1", "", 0, "::ffff:192.0.2.1"},   //
		{"192.0.2.1:1234", "  2001:db8::5  ", 1, "2001:db8::5"},
	} {
		if got := clientAddr([]byte(tc.src), tc.xff, tc.hops).String(); got != tc.want {
			t.Errorf("clientAddr(%q, %q, %d) = %s, want %s", tc.src, tc.xff, tc.hops, got, tc.want)
		}
	}
}

func TestClientKey(t *testing.T) {
	for _, tc := range []struct {
		addr   string
		prefix int
		want   string
	}{
		{"192.0.2.1:1", 64, "192.0.2.1"},
		{"[2001:db8:1:2:3:4:5:6]:1", 64, "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:3:4:5:6]:1", 128, "2001:db8:1:2:3:4:5:6"},
		{"[::ffff:192.0.2.1]:1", 64, "192.0.2.1"},
		{"[fe80::1%eth0]:1", 128, "fe80::1"},
		{"bad", 64, ""},
	} {
		if got := rules.ClientKey(clientAddr([]byte(tc.addr), "", 0), tc.prefix); got != tc.want {
			t.Errorf("ClientKey(%s, %d) = %q, want %q", tc.addr, tc.prefix, got, tc.want)
		}
	}
}
