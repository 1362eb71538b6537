package server

import (
	"context"
	"testing"

	"github.com/diana-gw/diana/internal/redistest"
)

// TestThreeInstancesBatched runs three dianad servers on one Redis in batched mode under
// concurrent load: no client gets more than its limit, most of the limit is used, and Redis sees
// calls for batches, far fewer than the requests.
func TestThreeInstancesBatched(t *testing.T) {
	const limit = 40
	tests := []struct{ name, limit string }{
		{"fixed_window", `{algorithm: fixed_window, limit: 40, window: ` + forever + `}`},
		{"sliding_log", `{algorithm: sliding_log, limit: 40, window: 1h}`},
		{"token_bucket", `{algorithm: token_bucket, rate: 40, period: 365d}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs := redistest.Start(t)
			servers := startThree(t, clusterConfig(exactTimeout, "1s", `  - name: per-ip
    by: [ip]
    mode: cluster
    on_error: closed
    batch: {max: 10}
    limit: `+tt.limit+"\n", rs.Addr))
			ips := clientIPs(4)
			// 3 servers × 4 goroutines × 40 requests: 120 per client, 40 of them admissible.
			got := hammer(t, servers, 4, 40, ips)
			admitted := 0
			for _, ip := range ips {
				if got[ip][200] > limit || got[ip][200]+got[ip][429] != 120 {
					t.Errorf("%s: statuses %v, want at most %d × 200 and the rest 429", ip, got[ip], limit)
				}
				admitted += got[ip][200]
			}
			stats, err := rs.CommandStats(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			calls := stats["evalsha"].Calls + stats["eval"].Calls
			t.Logf("%s: %d of 480 requests admitted (the limits add up to %d), %d Redis calls", tt.name, admitted, 4*limit, calls)
			// Units a server holds when the others run out are lost to them, so a client may get
			// less than its limit; but not much less with batches of at most 10 on 3 servers.
			if admitted < 4*(limit-3*10) {
				t.Errorf("admitted %d, want at least %d", admitted, 4*(limit-3*10))
			}
			if calls*4 > 480 {
				t.Errorf("%d Redis calls for 480 requests: batches are not used", calls)
			}
			var batches, spent float64
			for _, ts := range servers {
				batches += metric(t, ts, "diana_batches_total")
				spent += metric(t, ts, `diana_batch_units_total{outcome="spent"}`)
			}
			// Requests that came while their server was asking for a batch went to Redis one by
			// one: they are admitted without spending batched units. A server asks for one batch
			// of a key at a time, and asks for several keys may share a script call.
			if spent == 0 || int(spent) > admitted || batches == 0 || batches > float64(int64(len(ips))*calls) {
				t.Errorf("metrics: %v batched units spent, %v batches; want 1 to %d spent and 1 to %d batches", spent, batches, admitted, int64(len(ips))*calls)
			}
		})
	}
}
