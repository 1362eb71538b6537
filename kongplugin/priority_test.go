package main

import (
	"encoding/json"
	"os/exec"
	"sort"
	"testing"
)

// kongPriorities are the priorities of Kong's bundled plugins that refuse requests before the
// upstream, as Kong 3.9 declares them (kong/plugins/*/handler.lua).
var kongPriorities = map[string]int{"ip-restriction": 990, "acl": 950, "rate-limiting": 910}

// Kong runs a request's plugins by priority, highest first, and stops at the first that
// answers it. With the priority the binary dumps, a request that ip-restriction or acl refuses
// never reaches diana, and spends no client's limit: the client's first allowed request later
// passes. (At 999 diana ran first, and a refused request spent the limit.)
func TestPriorityOrder(t *testing.T) {
	bin := build(t, "github.com/diana-gw/diana/kongplugin", "diana")
	out, err := exec.Command(bin, "-dump").Output()
	if err != nil {
		t.Fatal(err)
	}
	var info struct{ Plugins []struct{ Priority int } }
	if err := json.Unmarshal(out, &info); err != nil || len(info.Plugins) != 1 {
		t.Fatalf("-dump: %v %s", err, out)
	}
	chain := []string{"diana"}
	prio := map[string]int{"diana": info.Plugins[0].Priority}
	for name, p := range kongPriorities {
		if name != "rate-limiting" {
			chain, prio[name] = append(chain, name), p
		}
	}
	sort.SliceStable(chain, func(i, j int) bool { return prio[chain[i]] > prio[chain[j]] })

	srv := startServer(t, bin)
	for _, refuser := range []string{"ip-restriction", "acl"} {
		id := srv.start(map[string]any{"algorithm": "fixed_window", "limit": 1, "window": "1h"}, "order-"+refuser)
		client := &kongReq{IP: "192.0.2.66"}
		// run sends a request through the chain; refused says whether the refuser refuses it.
		run := func(refused bool) int {
			for _, p := range chain {
				switch {
				case p == "diana":
					if res := srv.access(id, client); res.Exit {
						return res.Status
					}
				case p == refuser && refused:
					return 403
				}
			}
			return 200
		}
		for i := range 3 {
			if status := run(true); status != 403 {
				t.Fatalf("%s refuses request %d: the client got %d (chain %v)", refuser, i+1, status, chain)
			}
		}
		if status := run(false); status != 200 {
			t.Errorf("the client's first request %s lets through, after 3 it refused: %d, want 200: the refused ones spent its limit (chain %v)",
				refuser, status, chain)
		}
		if status := run(false); status != 429 {
			t.Errorf("the second request %s lets through: %d, want 429 (limit 1)", refuser, status)
		}
	}
}
