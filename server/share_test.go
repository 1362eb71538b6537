package server

import (
	"testing"

	"github.com/diana-gw/diana/internal/redistest"
)

// TestFallbackShareMetric: a dianad whose cluster rule falls back to local limiting learns its
// share of the rule's traffic through Redis in the background, and exports it. Alone, it has all
// of it.
func TestFallbackShareMetric(t *testing.T) {
	rs := redistest.Start(t)
	ts := startFile(t, clusterConfig(exactTimeout, "1s", `  - name: api
    mode: cluster
    on_error: local
    nodes: 4
    limit: {algorithm: fixed_window, limit: 100000, window: 1s}
`, rs.Addr))
	const series = `diana_fallback_share{rule="api"}`
	eventually(t, series+" 1", func() bool {
		get(t, ts.proxy+"/", "192.0.2.1")
		return metric(t, ts, series) == 1
	})
}
