package rules_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/diana-gw/diana/shared/rules"
)

// A request that gives a header the rules count by more than once is refused with 400 naming
// it, and takes nothing from any rule: which value is the identity would be a guess, and the
// upstream may read another one than the gateway counted.
func TestRepeatedIdentityHeader(t *testing.T) {
	const doc = `{"rules": [
		{"name": "key", "by": ["header:X-Api-Key"], "limit": {"algorithm": "fixed_window", "limit": 1, "window": "1h"}},
		{"name": "device", "by": ["device"], "limit": {"algorithm": "fixed_window", "limit": 5, "window": "1h"}}]}`
	for _, tc := range []struct {
		name     string
		headers  http.Header
		repeated string // set by the front end (its consumer header)
		want     string // the header refused; "" for a request decided by the rules
	}{
		{"key twice", http.Header{"X-Api-Key": {"fresh", "victim"}}, "", "X-Api-Key"},
		{"key twice, same value", http.Header{"X-Api-Key": {"victim", "victim"}}, "", "X-Api-Key"},
		{"device twice", http.Header{"X-Api-Key": {"k"}, "X-Device-Id": {"a", "b"}}, "", "X-Device-Id"},
		{"the front end's consumer header twice", http.Header{"X-Api-Key": {"k"}}, "X-Consumer", "X-Consumer"},
		{"another header twice", http.Header{"X-Api-Key": {"other"}, "Accept": {"a", "b"}}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, doc)
			in := &rules.Input{Method: "GET", Path: "/", ClientIP: "192.0.2.1", Headers: tc.headers, Repeated: tc.repeated}
			res := e.check(in)
			if res.Repeated != tc.want || res.Allowed == (tc.want != "") {
				t.Fatalf("Repeated %q, Allowed %v; want Repeated %q", res.Repeated, res.Allowed, tc.want)
			}
			if tc.want == "" {
				return
			}
			if status, body := res.Denial(); status != 400 || !strings.Contains(string(body), tc.want) || !res.Invalid() {
				t.Errorf("denial %d %s; want 400 naming %s", status, body, tc.want)
			}
			if obs := e.observed(); len(obs) != 0 {
				t.Errorf("rules decided a refused request: %v", obs)
			}
			// The victim's key is whole: the refused request took nothing.
			if res := e.check(&rules.Input{Method: "GET", Path: "/", ClientIP: "192.0.2.1", Headers: http.Header{"X-Api-Key": {"victim"}}}); !res.Allowed {
				t.Errorf("the key after the refused request: denied by %v", res.Rule.Name)
			}
		})
	}
}

// IdentityHeaders names each header the rules count by, once.
func TestIdentityHeaders(t *testing.T) {
	rs := mustDecode(t, `{"rules": [
		{"name": "a", "by": ["header:X-Api-Key", "ip"], "limit": {"algorithm": "fixed_window", "limit": 1, "window": "1h"}},
		{"name": "b", "by": ["header:x-api-key", "device:X-Dev"], "limit": {"algorithm": "fixed_window", "limit": 1, "window": "1h"}},
		{"name": "c", "by": ["consumer"], "limit": {"algorithm": "fixed_window", "limit": 1, "window": "1h"}}]}`)
	if got := strings.Join(rules.IdentityHeaders(rs), ","); got != "X-Api-Key,X-Dev" {
		t.Errorf("IdentityHeaders: %s, want X-Api-Key,X-Dev", got)
	}
}
