package rules_test

import (
	"context"
	"testing"

	"github.com/diana-gw/diana/shared/rules"
)

// Peek tells what every applying rule would answer, with its key, and changes nothing: the
// counts, the ban and the observations stay as they were.
func TestPeek(t *testing.T) {
	e := newEnv(t, `{"rules": [
		{"name": "per-ip", "by": ["ip"], "limit": {"algorithm": "fixed_window", "limit": 2, "window": "1m"}, "ban": "1h"},
		{"name": "all", "limit": {"algorithm": "fixed_window", "limit": 100, "window": "1m"}},
		{"name": "api", "match": {"paths": ["/api/*"]}, "limit": {"algorithm": "fixed_window", "limit": 1, "window": "1m"}}]}`)
	ctx := context.Background()
	in := func() *rules.Input { return &rules.Input{Method: "GET", Path: "/x/../y", ClientIP: "192.0.2.1"} }
	type want struct {
		rule, key string
		allowed   bool
		remaining int64
	}
	peek := func(wants ...want) {
		t.Helper()
		got, ok := e.eng.Peek(ctx, in())
		if !ok || len(got) != len(wants) {
			t.Fatalf("Peek = %+v, %v; want %d rules", got, ok, len(wants))
		}
		for i, w := range wants {
			g := got[i]
			if g.Rule.Name != w.rule || g.Key != w.key || g.Decision.Allowed != w.allowed || g.Decision.Remaining != w.remaining || g.Err != nil {
				t.Errorf("Peek[%d] = %s %q allowed %v remaining %d (%v); want %+v", i, g.Rule.Name, g.Key, g.Decision.Allowed, g.Decision.Remaining, g.Err, w)
			}
		}
	}
	peek(want{"per-ip", "per-ip|192.0.2.1", true, 1}, want{"all", "all", true, 99})
	peek(want{"per-ip", "per-ip|192.0.2.1", true, 1}, want{"all", "all", true, 99})
	for range 3 {
		e.eng.Check(ctx, in()) // two admitted, the third denied and banned
	}
	observed := len(e.obs)
	peek(want{"per-ip", "per-ip|192.0.2.1", false, 0}, want{"all", "all", true, 97})
	if len(e.obs) != observed {
		t.Errorf("Peek was observed: %v", e.obs[observed:])
	}
	if p, _ := e.eng.Peek(ctx, in()); p[0].Decision.RetryAfter < 3500*1_000_000 {
		t.Errorf("banned: RetryAfter %d µs, want about an hour", p[0].Decision.RetryAfter)
	}
}

func TestOwnsKey(t *testing.T) {
	r := &rules.Rule{Name: "per-ip"}
	for key, want := range map[string]bool{"per-ip": true, "per-ip|1.2.3.4": true, "per-ip2|x": false, "per-i": false, "other|per-ip": false} {
		if r.OwnsKey(key) != want {
			t.Errorf("OwnsKey(%q) = %v", key, !want)
		}
	}
}
