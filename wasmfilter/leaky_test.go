package main

import (
	"strings"
	"testing"

	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// A leaky bucket that would hold requests (no nodelay, delay below burst) fails the start with
// a message naming nodelay and delay: the filter cannot hold them, and forwarding them at once
// would make the rule mean something other than in dianad. One that forwards its burst at once
// (nodelay, delay ≥ burst, or no burst) starts and admits burst + 1 at once, then denies.
func TestLeakyBucketHoldsOrRefuses(t *testing.T) {
	leaky := func(extra string) string {
		return `{"rules": [{"name": "lb", "limit": {"algorithm": "leaky_bucket", "rate": 1, "period": "1m", "burst": 5` + extra + `}}]}`
	}
	fallback := `{"cluster": {"name": "d", "on_failure": "local", "rules": [{"name": "lb",
		"limit": {"algorithm": "leaky_bucket", "rate": 1, "period": "1m", "burst": 5}}]}}`
	for _, rn := range runners {
		// One emulator at a time (a process-wide singleton): each case in a subtest of its own.
		t.Run(rn.name, func(t *testing.T) {
			for _, tc := range []struct{ name, cfg, field string }{
				{"default", leaky(``), "rules[0].limit.nodelay"},
				{"delay below burst", leaky(`, "delay": 2`), "rules[0].limit.nodelay"},
				{"fallback rule", fallback, "cluster.rules[0].limit.nodelay"},
			} {
				t.Run(tc.name, func(t *testing.T) {
					e, st := tryStart(t, rn.vm(t), tc.cfg)
					if st != types.OnPluginStartStatusFailed {
						t.Fatal("plugin started")
					}
					logs := strings.Join(e.GetCriticalLogs(), "\n")
					for _, want := range []string{tc.field + ": leaky_bucket without nodelay holds", `"nodelay": true`, `"delay" at least burst`} {
						if !strings.Contains(logs, want) {
							t.Errorf("critical logs %q do not mention %q", logs, want)
						}
					}
				})
			}
			for _, tc := range []struct {
				name, cfg string
				admitted  int
			}{
				{"nodelay", leaky(`, "nodelay": true`), 6},
				{"delay at burst", leaky(`, "delay": 5`), 6},
				{"no burst", `{"rules": [{"name": "lb", "limit": {"algorithm": "leaky_bucket", "rate": 1, "period": "1m"}}]}`, 1},
			} {
				t.Run(tc.name, func(t *testing.T) {
					e := start(t, rn.vm(t), tc.cfg)
					for i := range tc.admitted + 1 {
						r := e.request("/")
						if want := i == tc.admitted; (r.status == 429) != want || r.status != 0 && r.status != 429 || r.action == types.ActionPause && r.status == 0 {
							t.Fatalf("request %d: status %d, action %v; want %d admitted at once, then 429", i+1, r.status, r.action, tc.admitted)
						}
					}
				})
			}
		})
	}
}
