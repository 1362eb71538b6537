package httplimit_test

import (
	"context"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/diana-gw/diana/httplimit"
	"github.com/diana-gw/diana/shared/rules"
)

// TestForwardedInput is the reading of forward-auth requests as nginx (auth_request with the
// shipped examples/nginx.conf), Traefik (ForwardAuth) and Caddy (forward_auth) send them, and as
// forging clients and untrusted peers do.
func TestForwardedInput(t *testing.T) {
	o := httplimit.Options{
		TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
		ConsumerHeader: "X-Consumer",
		IPv6Prefix:     64,
	}
	const gw, stranger = "10.0.0.1:40000", "203.0.113.9:5555"
	long := "/" + strings.Repeat("a", httplimit.MaxForwardedURI-1)
	type hdr = [][2]string
	tests := []struct {
		name    string
		peer    string
		method  string // the auth request's own method; GET when ""
		headers hdr
		want    rules.Input // Method, Host, Path, ClientIP, Consumer
		ignored bool
		err     string // a part of the error; "" for none
	}{
		{"nginx", gw, "POST", hdr{{"X-Original-URI", "/api/users?page=2"}, {"X-Original-Method", "POST"},
			{"X-Forwarded-Host", "api.example.com"}, {"X-Forwarded-For", "198.51.100.7"}},
			rules.Input{Method: "POST", Host: "api.example.com", Path: "/api/users?page=2", ClientIP: "198.51.100.7"}, false, ""},
		{"nginx without X-Original-Method: the subrequest's own", gw, "DELETE", hdr{{"X-Original-URI", "/a"}, {"X-Real-IP", "198.51.100.8"}},
			rules.Input{Method: "DELETE", Host: "dianad:9090", Path: "/a", ClientIP: "198.51.100.8"}, false, ""},
		{"Traefik", gw, "GET", hdr{{"X-Forwarded-Method", "PUT"}, {"X-Forwarded-Uri", "/v2/items/1"}, {"X-Forwarded-Proto", "https"},
			{"X-Forwarded-Host", "shop.example.com"}, {"X-Forwarded-For", "198.51.100.9"}},
			rules.Input{Method: "PUT", Host: "shop.example.com", Path: "/v2/items/1", ClientIP: "198.51.100.9"}, false, ""},
		{"Caddy, IPv6 client counted by its /64", gw, "GET", hdr{{"X-Forwarded-Method", "GET"}, {"X-Forwarded-Uri", "/"},
			{"X-Forwarded-Host", "example.org"}, {"X-Forwarded-For", "2001:db8:1:2::99"}},
			rules.Input{Method: "GET", Host: "example.org", Path: "/", ClientIP: "2001:db8:1:2::/64"}, false, ""},
		{"both conventions agreeing", gw, "GET", hdr{{"X-Original-URI", "/x"}, {"X-Forwarded-Uri", "/x"},
			{"X-Original-Method", "GET"}, {"X-Forwarded-Method", "GET"}},
			rules.Input{Method: "GET", Host: "dianad:9090", Path: "/x", ClientIP: "10.0.0.1"}, false, ""},
		{"consumer header from a trusted gateway", gw, "GET", hdr{{"X-Forwarded-Uri", "/"}, {"X-Consumer", "alice"}},
			rules.Input{Method: "GET", Host: "dianad:9090", Path: "/", ClientIP: "10.0.0.1", Consumer: "alice"}, false, ""},
		{"URIs with // and .. are passed on raw (the rules normalise them)", gw, "GET", hdr{{"X-Original-URI", "/api//x/../login?a=/.."}},
			rules.Input{Method: "GET", Host: "dianad:9090", Path: "/api//x/../login?a=/..", ClientIP: "10.0.0.1"}, false, ""},
		{"a URI of exactly the bound", gw, "GET", hdr{{"X-Original-URI", long}},
			rules.Input{Method: "GET", Host: "dianad:9090", Path: long, ClientIP: "10.0.0.1"}, false, ""},

		// X-Forwarded-For as ClientIP reads it.
		{"several X-Forwarded-For lines, forged entries on the left", gw, "GET",
			hdr{{"X-Forwarded-Uri", "/"}, {"X-Forwarded-For", "6.6.6.6, 198.51.100.7"}, {"X-Forwarded-For", "10.0.0.5"}},
			rules.Input{Method: "GET", Host: "dianad:9090", Path: "/", ClientIP: "198.51.100.7"}, false, ""},
		{"an invalid X-Forwarded-For entry: the hop that added it", gw, "GET",
			hdr{{"X-Forwarded-Uri", "/"}, {"X-Forwarded-For", "198.51.100.7, not-an-ip"}},
			rules.Input{Method: "GET", Host: "dianad:9090", Path: "/", ClientIP: "10.0.0.1"}, false, ""},
		{"a huge X-Forwarded-For of garbage", gw, "GET",
			hdr{{"X-Forwarded-Uri", "/"}, {"X-Forwarded-For", strings.Repeat("x,", 50_000) + "198.51.100.7"}},
			rules.Input{Method: "GET", Host: "dianad:9090", Path: "/", ClientIP: "198.51.100.7"}, false, ""},

		// Untrusted peers: decided as the request they send, from their own address.
		{"untrusted peer: forwarded headers not believed", stranger, "GET", hdr{{"X-Original-URI", "/fresh/1"},
			{"X-Forwarded-Method", "POST"}, {"X-Forwarded-Host", "evil"}, {"X-Forwarded-For", "1.2.3.4"}, {"X-Consumer", "bob"}},
			rules.Input{Method: "GET", Host: "dianad:9090", Path: "/v1/auth?deny_status=403", ClientIP: "203.0.113.9"}, true, ""},
		{"untrusted peer without forwarded headers", stranger, "PATCH", hdr{{"X-Api-Key", "k"}},
			rules.Input{Method: "PATCH", Host: "dianad:9090", Path: "/v1/auth?deny_status=403", ClientIP: "203.0.113.9"}, false, ""},

		// Refused: the request cannot be told reliably.
		{"no original URI", gw, "GET", hdr{{"X-Original-Method", "GET"}}, rules.Input{}, false, "neither X-Original-URI nor X-Forwarded-Uri"},
		{"empty original URI", gw, "GET", hdr{{"X-Forwarded-Uri", ""}}, rules.Input{}, false, "neither X-Original-URI nor X-Forwarded-Uri"},
		{"a client's X-Original-URI beside Traefik's X-Forwarded-Uri", gw, "GET",
			hdr{{"X-Original-URI", "/fresh/1"}, {"X-Forwarded-Uri", "/login"}}, rules.Input{}, false, "X-Original-URI and X-Forwarded-Uri disagree"},
		{"two X-Forwarded-Uri lines", gw, "GET",
			hdr{{"X-Forwarded-Uri", "/login"}, {"X-Forwarded-Uri", "/other"}}, rules.Input{}, false, "X-Forwarded-Uri is given 2 times"},
		{"two equal X-Original-URI lines", gw, "GET",
			hdr{{"X-Original-URI", "/login"}, {"X-Original-URI", "/login"}}, rules.Input{}, false, "X-Original-URI is given 2 times"},
		{"two equal X-Forwarded-Method lines", gw, "GET",
			hdr{{"X-Forwarded-Uri", "/"}, {"X-Forwarded-Method", "GET"}, {"X-Forwarded-Method", "GET"}}, rules.Input{}, false, "X-Forwarded-Method is given 2 times"},
		{"methods disagree", gw, "GET", hdr{{"X-Forwarded-Uri", "/"}, {"X-Original-Method", "GET"}, {"X-Forwarded-Method", "POST"}},
			rules.Input{}, false, "X-Original-Method and X-Forwarded-Method disagree"},
		{"two X-Forwarded-Host lines", gw, "GET", hdr{{"X-Forwarded-Uri", "/"}, {"X-Forwarded-Host", "a"}, {"X-Forwarded-Host", "b"}},
			rules.Input{}, false, "X-Forwarded-Host is given 2 times"},
		{"a URI over the bound", gw, "GET", hdr{{"X-Original-URI", long + "b"}}, rules.Input{}, false, "above the bound of 16384"},
		{"a method that is no token", gw, "GET", hdr{{"X-Forwarded-Uri", "/"}, {"X-Forwarded-Method", "GET /admin"}},
			rules.Input{}, false, "is not an HTTP method"},
		{"a method too long", gw, "GET", hdr{{"X-Forwarded-Uri", "/"}, {"X-Forwarded-Method", strings.Repeat("M", 65)}},
			rules.Input{}, false, "is not an HTTP method"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := tt.method
			if m == "" {
				m = "GET"
			}
			r := httptest.NewRequest(m, "/v1/auth?deny_status=403", nil)
			r.Host, r.RemoteAddr = "dianad:9090", tt.peer
			for _, h := range tt.headers {
				r.Header.Add(h[0], h[1])
			}
			in, ignored, err := o.ForwardedInput(r)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want one with %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := rules.Input{Method: in.Method, Host: in.Host, Path: in.Path, ClientIP: in.ClientIP, Consumer: in.Consumer}
			if got != tt.want || ignored != tt.ignored {
				t.Errorf("got %+v ignored=%v\nwant %+v ignored=%v", got, ignored, tt.want, tt.ignored)
			}
			if in.Headers.Get("X-Forwarded-Host") != r.Header.Get("X-Forwarded-Host") {
				t.Error("the rules do not see the request's headers")
			}
		})
	}
}

// TestForwardedPathsNormalised: an original URI spelt with //, .., escapes or a query meets
// the rule on its normal path and shares its count.
func TestForwardedPathsNormalised(t *testing.T) {
	e := engine(t, `[{"name": "login", "by": ["ip", "path"], "match": {"paths": ["/api/login"]},
		"limit": {"algorithm": "fixed_window", "limit": 1, "window": "1h"}}]`, nil)
	o := httplimit.Options{TrustedProxies: loopback}
	for i, uri := range []string{"/api//login", "/api/login", "//api/./login/", "/x/../api/login?a=b", "/api/%6cogin", "/api/login;jsessionid=1"} {
		r := httptest.NewRequest("GET", "/v1/auth", nil)
		r.RemoteAddr = "127.0.0.1:1234"
		r.Header.Set("X-Original-URI", uri)
		r.Header.Set("X-Forwarded-For", "198.51.100.1")
		in, _, err := o.ForwardedInput(r)
		if err != nil {
			t.Fatal(err)
		}
		res := e.Check(context.Background(), &in)
		if res.Rule == nil || res.Rule.Name != "login" {
			t.Fatalf("%s: rule login did not apply", uri)
		}
		if want := i == 0; res.Allowed != want {
			t.Errorf("%s: allowed = %v, want %v (one request an hour, whatever the spelling)", uri, res.Allowed, want)
		}
	}
}

// FuzzForwardedInput: whatever the headers, ForwardedInput answers without panicking; from an
// untrusted peer it decides the request as sent and believes none of the forwarded headers;
// from a trusted one, the path it decides on is one the headers told, within the bound, or it
// refuses.
func FuzzForwardedInput(f *testing.F) {
	f.Add(true, "/api//login?a=1", "", "POST", "", "example.com", "198.51.100.7")
	f.Add(true, "/a", "/b", "", "", "", "")
	f.Add(true, "", "/x", "GET", "PUT", "a", "6.6.6.6, 10.0.0.1")
	f.Add(false, "/fresh", "/other", "POST", "GET /x", "evil", "1.2.3.4")
	f.Add(true, strings.Repeat("/..", 6000), "", "\x7f", "", "", "not-an-ip")
	f.Fuzz(func(t *testing.T, trusted bool, origURI, fwdURI, origMethod, fwdMethod, host, xff string) {
		o := httplimit.Options{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, IPv6Prefix: 64}
		r := httptest.NewRequest("GET", "/v1/auth", nil)
		r.RemoteAddr = "203.0.113.9:1"
		if trusted {
			r.RemoteAddr = "10.0.0.1:1"
		}
		for name, v := range map[string]string{"X-Original-URI": origURI, "X-Forwarded-Uri": fwdURI,
			"X-Original-Method": origMethod, "X-Forwarded-Method": fwdMethod, "X-Forwarded-Host": host, "X-Forwarded-For": xff} {
			if v != "" {
				r.Header.Set(name, v)
			}
		}
		in, ignored, err := o.ForwardedInput(r)
		if !trusted {
			if err != nil || in.Path != "/v1/auth" || in.Method != "GET" || in.ClientIP != "203.0.113.9" {
				t.Fatalf("untrusted peer: %+v, %v", in, err)
			}
			if ignored != (origURI != "" || fwdURI != "" || origMethod != "" || fwdMethod != "") {
				t.Fatalf("ignored = %v", ignored)
			}
			return
		}
		if err != nil {
			return
		}
		if in.Path != origURI && in.Path != fwdURI || in.Path == "" || len(in.Path) > httplimit.MaxForwardedURI {
			t.Fatalf("path %q from X-Original-URI %q, X-Forwarded-Uri %q", in.Path, origURI, fwdURI)
		}
		if origURI != "" && fwdURI != "" && origURI != fwdURI {
			t.Fatalf("disagreeing URIs %q and %q accepted", origURI, fwdURI)
		}
	})
}
