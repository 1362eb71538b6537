package rules_test

import (
	"testing"

	"github.com/diana-gw/diana/shared/rules"
)

// ReadsOf names what the rules read, by their dimensions and matches, exceptions included.
func TestReadsOf(t *testing.T) {
	const lim = `"limit": {"algorithm": "fixed_window", "limit": 1, "window": "1s"}`
	for _, tc := range []struct {
		rule string
		want rules.Reads
	}{
		{`{"name": "a", "by": ["ip", "path"], ` + lim + `}`, rules.Reads{Path: true, Addr: true}},
		{`{"name": "a", "by": ["global"], ` + lim + `}`, rules.Reads{}},
		{`{"name": "a", "by": ["method"], ` + lim + `}`, rules.Reads{Method: true}},
		{`{"name": "a", "by": ["host", "route"], ` + lim + `}`, rules.Reads{Host: true, Route: true}},
		{`{"name": "a", "by": ["consumer", "header:X-K"], ` + lim + `}`, rules.Reads{Consumer: true, Headers: true}},
		{`{"name": "a", "by": ["device"], ` + lim + `}`, rules.Reads{Headers: true}},
		{`{"name": "a", "match": {"methods": "GET", "hosts": "a.example"}, ` + lim + `}`, rules.Reads{Method: true, Host: true}},
		{`{"name": "a", "match": {"paths": "/x", "not": [{"consumers": "c"}, {"headers": {"X-A": "1"}}]}, ` + lim + `}`, rules.Reads{Consumer: true, Headers: true, Path: true}},
		{`{"name": "u", "unlimited": true, "match": {"clients": "10.0.0.0/8", "methods": "GET"}}`, rules.Reads{Method: true, Addr: true}},
	} {
		if got := rules.ReadsOf(mustDecode(t, `{"rules": [`+tc.rule+`]}`)); got != tc.want {
			t.Errorf("%s: reads %+v, want %+v", tc.rule, got, tc.want)
		}
	}
}
