package rules_test

import (
	"net/http"
	"net/netip"
	"testing"

	"github.com/diana-gw/diana/shared/rules"
)

// hdr builds request headers from name, value pairs.
func hdr(kv ...string) http.Header {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Set(kv[i], kv[i+1])
	}
	return h
}

func TestMatch(t *testing.T) {
	type req = rules.Input
	tests := []struct {
		match string // the rule's match object
		in    req
		want  bool
	}{
		// An empty match applies to every request.
		{`{}`, req{}, true},
		{`{}`, req{Method: "DELETE", Path: "/x", Host: "h"}, true},

		// Methods: without regard to case (upstreams that upper-case run "post" as POST); GET
		// includes HEAD, whose request GET's handler serves.
		{`{"methods": ["GET", "POST"]}`, req{Method: "GET"}, true},
		{`{"methods": ["GET", "POST"]}`, req{Method: "POST"}, true},
		{`{"methods": ["GET", "POST"]}`, req{Method: "PUT"}, false},
		{`{"methods": ["GET", "POST"]}`, req{Method: "get"}, true},
		{`{"methods": ["POST"]}`, req{Method: "post"}, true},
		{`{"methods": ["POST"]}`, req{Method: "pOsT"}, true},
		{`{"methods": ["GET"]}`, req{Method: "HEAD"}, true},
		{`{"methods": ["GET"]}`, req{Method: "head"}, true},
		{`{"methods": ["HEAD"]}`, req{Method: "GET"}, false},
		{`{"methods": ["POST"]}`, req{Method: "HEAD"}, false},
		{`{"not": {"methods": ["GET"]}}`, req{Method: "HEAD"}, false},
		{`{"methods": "GET"}`, req{Method: "GET"}, true},

		// Exact paths.
		{`{"paths": ["/login"]}`, req{Path: "/login"}, true},
		{`{"paths": ["/login"]}`, req{Path: "/login/"}, true}, // a final slash is the same resource
		{`{"paths": ["/login"]}`, req{Path: "/login/x"}, false},
		{`{"paths": ["/login"]}`, req{Path: "/logins"}, false},
		{`{"paths": ["/login"]}`, req{Path: "/Login"}, false},
		{`{"paths": ["/login"]}`, req{Path: "/"}, false},
		{`{"paths": ["/login"]}`, req{Path: ""}, false},
		{`{"paths": ["/api/"]}`, req{Path: "/api/"}, true},
		{`{"paths": ["/api/"]}`, req{Path: "/api"}, true},
		{`{"paths": ["/api/login"]}`, req{Path: "/api//login"}, true},
		{`{"paths": ["/api/login"]}`, req{Path: "/x/../api/./login"}, true},
		{`{"paths": ["/api/login"]}`, req{Path: "/api/%2e%2e/api/log%69n?x"}, true},
		{`{"paths": ["/api/login"]}`, req{Path: "/api%2Flogin"}, true},
		{`{"paths": ["/é/**"]}`, req{Path: "/%c3%a9/x"}, true},
		{`{"paths": ["//a/./b/../c/"]}`, req{Path: "/a/c"}, true},
		{`{"paths": ["/a", "/b"]}`, req{Path: "/b"}, true},
		{`{"paths": ["/a", "/b"]}`, req{Path: "/c"}, false},

		// The root.
		{`{"paths": ["/"]}`, req{Path: "/"}, true},
		{`{"paths": ["/"]}`, req{Path: "/x"}, false},
		{`{"paths": ["/"]}`, req{Path: ""}, true},

		// "*": one non-empty segment.
		{`{"paths": ["/users/*/orders"]}`, req{Path: "/users/42/orders"}, true},
		{`{"paths": ["/users/*/orders"]}`, req{Path: "/users//orders"}, false},
		{`{"paths": ["/users/*/orders"]}`, req{Path: "/users/1/2/orders"}, false},
		{`{"paths": ["/users/*/orders"]}`, req{Path: "/users/1/orders/"}, true},
		{`{"paths": ["/users/*/orders"]}`, req{Path: "/users/1"}, false},
		{`{"paths": ["/users/*"]}`, req{Path: "/users/1"}, true},
		{`{"paths": ["/users/*"]}`, req{Path: "/users/"}, false},
		{`{"paths": ["/users/*"]}`, req{Path: "/users"}, false},
		{`{"paths": ["/users/*"]}`, req{Path: "/users/1/"}, true},
		{`{"paths": ["/*"]}`, req{Path: "/"}, false},
		{`{"paths": ["/*"]}`, req{Path: "/a"}, true},

		// A final "**": any rest, including none.
		{`{"paths": ["/api/**"]}`, req{Path: "/api"}, true},
		{`{"paths": ["/api/**"]}`, req{Path: "/api/"}, true},
		{`{"paths": ["/api/**"]}`, req{Path: "/api/v1/users/7"}, true},
		{`{"paths": ["/api/**"]}`, req{Path: "/apix"}, false},
		{`{"paths": ["/api/**"]}`, req{Path: "/ap"}, false},
		{`{"paths": ["/api/**"]}`, req{Path: "/"}, false},
		{`{"paths": ["/api/**"]}`, req{Path: "/v1/api"}, false},
		{`{"paths": ["/**"]}`, req{Path: "/"}, true},
		{`{"paths": ["/**"]}`, req{Path: "/a/b/c"}, true},
		{`{"paths": ["/*/**"]}`, req{Path: "/a"}, true},
		{`{"paths": ["/*/**"]}`, req{Path: "/a/b"}, true},
		{`{"paths": ["/*/**"]}`, req{Path: "/"}, false},
		{`{"paths": ["/api/*/x/**"]}`, req{Path: "/api/v2/x/y/z"}, true},
		{`{"paths": ["/api/*/x/**"]}`, req{Path: "/api/v2/y"}, false},

		// Hosts: case-insensitive, port ignored.
		{`{"hosts": ["api.example.com"]}`, req{Host: "api.example.com"}, true},
		{`{"hosts": ["api.example.com"]}`, req{Host: "API.Example.COM"}, true},
		{`{"hosts": ["API.EXAMPLE.COM"]}`, req{Host: "api.example.com"}, true},
		{`{"hosts": ["api.example.com"]}`, req{Host: "api.example.com:8080"}, true},
		{`{"hosts": ["api.example.com"]}`, req{Host: "api.example.com."}, true},
		{`{"hosts": ["api.example.com"]}`, req{Host: "example.com"}, false},
		{`{"hosts": ["api.example.com"]}`, req{Host: "xapi.example.com"}, false},
		{`{"hosts": ["api.example.com"]}`, req{Host: "api.example.com.evil"}, false},
		{`{"hosts": ["api.example.com"]}`, req{Host: ""}, false},
		{`{"hosts": ["10.0.0.1"]}`, req{Host: "10.0.0.1:80"}, true},
		{`{"hosts": ["10.0.0.1"]}`, req{Host: "10.0.0.10"}, false},

		// IPv6 literals, with and without a port.
		{`{"hosts": ["[::1]"]}`, req{Host: "[::1]:8080"}, true},
		{`{"hosts": ["[::1]"]}`, req{Host: "[::1]"}, true},
		{`{"hosts": ["[::1]"]}`, req{Host: "[::2]:8080"}, false},
		{`{"hosts": ["[2001:db8::1]"]}`, req{Host: "[2001:DB8::1]:443"}, true},
		{`{"hosts": ["[2001:db8::1]"]}`, req{Host: "2001:db8::1"}, false},
		{`{"hosts": ["example.com"]}`, req{Host: "[::1]:8080"}, false},

		// "*.domain": any subdomain, not the domain itself.
		{`{"hosts": ["*.example.com"]}`, req{Host: "a.example.com"}, true},
		{`{"hosts": ["*.example.com"]}`, req{Host: "a.b.example.com"}, true},
		{`{"hosts": ["*.example.com"]}`, req{Host: "A.Example.COM:443"}, true},
		{`{"hosts": ["*.example.com"]}`, req{Host: "example.com"}, false},
		{`{"hosts": ["*.example.com"]}`, req{Host: ".example.com"}, false},
		{`{"hosts": ["*.example.com"]}`, req{Host: "aexample.com"}, false},
		{`{"hosts": ["*.example.com"]}`, req{Host: "a.example.org"}, false},
		{`{"hosts": ["example.com"]}`, req{Host: "a.example.com"}, false},
		{`{"hosts": ["example.com", "*.example.com"]}`, req{Host: "example.com"}, true},
		{`{"hosts": ["example.com", "*.example.com"]}`, req{Host: "www.example.com"}, true},

		// Headers: a value, or "*" for presence; names are case-insensitive, values are not.
		{`{"headers": {"X-Env": "prod"}}`, req{Headers: hdr("X-Env", "prod")}, true},
		{`{"headers": {"x-env": "prod"}}`, req{Headers: hdr("X-ENV", "prod")}, true},
		{`{"headers": {"X-Env": "prod"}}`, req{Headers: hdr("X-Env", "Prod")}, false},
		{`{"headers": {"X-Env": "prod"}}`, req{Headers: hdr("X-Other", "prod")}, false},
		{`{"headers": {"X-Env": "prod"}}`, req{}, false},
		{`{"headers": {"X-Api-Key": "*"}}`, req{Headers: hdr("X-Api-Key", "k1")}, true},
		{`{"headers": {"X-Api-Key": "*"}}`, req{Headers: hdr("X-Api-Key", "")}, false},
		{`{"headers": {"X-Api-Key": "*"}}`, req{Headers: hdr()}, false},
		{`{"headers": {"X-A": "1", "X-B": "*"}}`, req{Headers: hdr("X-A", "1", "X-B", "2")}, true},
		{`{"headers": {"X-A": "1", "X-B": "*"}}`, req{Headers: hdr("X-A", "1")}, false},

		// Clients: addresses and blocks; IPv4-mapped addresses count as IPv4; no address, no match.
		{`{"clients": ["10.0.0.0/8"]}`, req{Addr: addr("10.1.2.3")}, true},
		{`{"clients": ["10.0.0.0/8"]}`, req{Addr: addr("11.1.2.3")}, false},
		{`{"clients": ["10.0.0.0/8"]}`, req{Addr: addr("::ffff:10.1.2.3")}, true},
		{`{"clients": ["10.0.0.0/8"]}`, req{}, false},
		{`{"clients": "192.0.2.7"}`, req{Addr: addr("192.0.2.7")}, true},
		{`{"clients": "192.0.2.7"}`, req{Addr: addr("192.0.2.8")}, false},
		{`{"clients": ["2001:db8::/32"]}`, req{Addr: addr("2001:db8:1::7")}, true},
		{`{"clients": ["2001:db8::/32"]}`, req{Addr: addr("2001:db9::7")}, false},
		{`{"clients": ["::ffff:10.0.0.0/104"]}`, req{Addr: addr("10.9.9.9")}, true},
		{`{"clients": ["0.0.0.0/0"]}`, req{Addr: addr("2001:db8::1")}, false},
		{`{"clients": ["10.0.0.0/8", "::/0"]}`, req{Addr: addr("2001:db8::1")}, true},

		// Consumers: exact names; a request without a consumer matches none.
		{`{"consumers": ["alice", "bob"]}`, req{Consumer: "bob"}, true},
		{`{"consumers": ["alice", "bob"]}`, req{Consumer: "Bob"}, false},
		{`{"consumers": ["alice", "bob"]}`, req{}, false},

		// Not: a request matching any exception is not the rule's.
		{`{"not": {"clients": ["10.0.0.0/8"]}}`, req{Addr: addr("10.1.2.3")}, false},
		{`{"not": {"clients": ["10.0.0.0/8"]}}`, req{Addr: addr("192.0.2.1")}, true},
		{`{"not": {"clients": ["10.0.0.0/8"]}}`, req{}, true}, // an unknown address is no exception
		{`{"paths": ["/api/**"], "not": [{"paths": ["/api/health"]}, {"consumers": ["partner"]}]}`, req{Path: "/api/x"}, true},
		{`{"paths": ["/api/**"], "not": [{"paths": ["/api/health"]}, {"consumers": ["partner"]}]}`, req{Path: "/api//health/"}, false},
		{`{"paths": ["/api/**"], "not": [{"paths": ["/api/health"]}, {"consumers": ["partner"]}]}`, req{Path: "/api/x", Consumer: "partner"}, false},
		{`{"paths": ["/api/**"], "not": [{"paths": ["/api/health"]}, {"consumers": ["partner"]}]}`, req{Path: "/x", Consumer: "z"}, false},
		{`{"not": {"methods": ["GET"], "paths": ["/health"]}}`, req{Method: "GET", Path: "/health"}, false},
		{`{"not": {"methods": ["GET"], "paths": ["/health"]}}`, req{Method: "POST", Path: "/health"}, true},
		{`{"not": {"headers": {"X-Internal": "1"}}}`, req{Headers: hdr("X-Internal", "1")}, false},
		{`{"not": {"headers": {"X-Internal": "1"}}}`, req{Headers: hdr("X-Internal", "2")}, true},

		// Every part must match.
		{
			`{"methods": ["POST"], "paths": ["/api/**"], "hosts": ["*.example.com"], "headers": {"X-Env": "prod"}}`,
			req{Method: "POST", Path: "/api/v1", Host: "a.example.com", Headers: hdr("X-Env", "prod")}, true,
		},
		{
			`{"methods": ["POST"], "paths": ["/api/**"], "hosts": ["*.example.com"], "headers": {"X-Env": "prod"}}`,
			req{Method: "GET", Path: "/api/v1", Host: "a.example.com", Headers: hdr("X-Env", "prod")}, false,
		},
		{
			`{"methods": ["POST"], "paths": ["/api/**"], "hosts": ["*.example.com"], "headers": {"X-Env": "prod"}}`,
			req{Method: "POST", Path: "/v1", Host: "a.example.com", Headers: hdr("X-Env", "prod")}, false,
		},
		{
			`{"methods": ["POST"], "paths": ["/api/**"], "hosts": ["*.example.com"], "headers": {"X-Env": "prod"}}`,
			req{Method: "POST", Path: "/api/v1", Host: "example.com", Headers: hdr("X-Env", "prod")}, false,
		},
		{
			`{"methods": ["POST"], "paths": ["/api/**"], "hosts": ["*.example.com"], "headers": {"X-Env": "prod"}}`,
			req{Method: "POST", Path: "/api/v1", Host: "a.example.com"}, false,
		},
	}
	for _, tt := range tests {
		r := mustRule(t, `{"name": "m", "match": `+tt.match+`, "limit": {"algorithm": "fixed_window", "limit": 1, "window": "1s"}}`)
		// The paths are as clients send them; Engine.Check normalises them before any match.
		tt.in.Path, _ = rules.NormalPath(tt.in.Path, rules.DecodeSlashes)
		if got := r.Match.Matches(&tt.in); got != tt.want {
			t.Errorf("match %s, request %+v: Matches = %v, want %v", tt.match, tt.in, got, tt.want)
		}
	}
}

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }

// A match built by hand, without the checks of decoding, never panics.
func TestMatchUncompiled(t *testing.T) {
	m := rules.Match{Hosts: []string{"", "*"}, Methods: []string{""}}
	in := rules.Input{Host: ":", Method: ""}
	m.Matches(&in)
	m = rules.Match{Hosts: []string{"", "*"}}
	m.Matches(&rules.Input{Host: "[::1]:80"})
}
