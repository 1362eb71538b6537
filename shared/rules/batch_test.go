package rules_test

import (
	"strings"
	"testing"

	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/rules"
)

func TestDecodeBatch(t *testing.T) {
	tests := []struct {
		name, limit, batch string
		lease              algos.Script // the algorithm batches are taken with
		maxAge             int64
		min, max           int64
	}{
		{"fixed window keeps its algorithm", `{"algorithm": "fixed_window", "limit": 100, "window": "1m"}`, `{"max": 50}`,
			script(algos.NewFixedWindow(100, algos.Minute)), algos.Second, 1, 50},
		{"sliding window: a tenth of the window", `{"algorithm": "sliding_window", "limit": 100, "window": "200ms"}`, `{"max": 50, "min": 2}`,
			script(algos.NewSlidingWindow(100, 200*algos.Millisecond)), 20 * algos.Millisecond, 2, 50},
		{"sliding log is lengthened by a tenth", `{"algorithm": "sliding_log", "limit": 100, "window": "1s"}`, `{"max": 50}`,
			script(algos.NewSlidingLog(100, 1100*algos.Millisecond)), 100 * algos.Millisecond, 1, 50},
		{"sliding log with an age", `{"algorithm": "sliding_log", "limit": 100, "window": "1s"}`, `{"max": 50, "max_age": "20ms"}`,
			script(algos.NewSlidingLog(100, 1020*algos.Millisecond)), 20 * algos.Millisecond, 1, 50},
		{"token bucket loses a tenth of its burst", `{"algorithm": "token_bucket", "rate": 100, "burst": 200}`, `{"max": 50}`,
			script(algos.NewGCRA(100, algos.Second, 180)), 200 * algos.Millisecond, 1, 50},
		{"token bucket with an age rounds the units up", `{"algorithm": "token_bucket", "rate": 100, "burst": 200}`, `{"max": 50, "max_age": "15ms"}`,
			script(algos.NewGCRA(100, algos.Second, 198)), 15 * algos.Millisecond, 1, 50},
		{"leaky bucket nodelay", `{"algorithm": "leaky_bucket", "rate": 10, "burst": 9, "nodelay": true}`, `{"max": 5}`,
			script(algos.NewLeakyBucket(10, algos.Second, 8, algos.NoDelay)), 100 * algos.Millisecond, 1, 5},
		{"ban wraps the lease", `{"algorithm": "fixed_window", "limit": 100, "window": "1m"}`, `{"max": 50}`,
			banned(script(algos.NewFixedWindow(100, algos.Minute)), algos.Minute), algos.Second, 1, 50},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ban := ""
			if strings.HasPrefix(tt.name, "ban") {
				ban = `"ban": "1m", `
			}
			r := mustRule(t, `{"name": "b", "mode": "cluster", `+ban+`"limit": `+tt.limit+`, "batch": `+tt.batch+`}`)
			b, ok := r.Alg.(*rules.Batched)
			if !ok {
				t.Fatalf("Alg is %T, want *rules.Batched", r.Alg)
			}
			if got := b.Batching.Alg.Script(); !equalScripts(got, tt.lease) {
				t.Errorf("batch algorithm %+v, want %+v", got, tt.lease)
			}
			if b.Batching.MaxAge != tt.maxAge || b.Min != tt.min || b.Max != tt.max {
				t.Errorf("max_age %d, min %d, max %d; want %d, %d, %d", b.Batching.MaxAge, b.Min, b.Max, tt.maxAge, tt.min, tt.max)
			}
			// The rule's own algorithm still decides (fail policies, stores that do not lease).
			if b.Script().Limit != b.Algorithm.Script().Limit || b.Algorithm == nil {
				t.Errorf("embedded algorithm missing")
			}
		})
	}
}

func equalScripts(a, b algos.Script) bool {
	if a.Name != b.Name || a.Limit != b.Limit || a.Ban != b.Ban || a.Log != b.Log || len(a.Args) != len(b.Args) {
		return false
	}
	for i := range a.Args {
		if a.Args[i] != b.Args[i] {
			return false
		}
	}
	return true
}

func TestDecodeBatchErrors(t *testing.T) {
	const fw = `"limit": {"algorithm": "fixed_window", "limit": 5, "window": "1s"}`
	tests := []struct{ name, rule, path, reason string }{
		{"local mode", `{"name": "a", ` + fw + `, "batch": {"max": 5}}`, "rules[0].batch", "applies only to cluster mode"},
		{"min above max", `{"name": "a", "mode": "cluster", ` + fw + `, "batch": {"max": 5, "min": 6}}`, "rules[0].batch.min", "must be at most max (5), got 6"},
		{"no max", `{"name": "a", "mode": "cluster", ` + fw + `, "batch": {}}`, "rules[0].batch.max", "is required"},
		{"delay", `{"name": "a", "mode": "cluster", "action": "delay", "max_delay": "1s", ` + fw + `, "batch": {"max": 5}}`, "rules[0].batch", "cannot be combined with action delay"},
		{"concurrency", `{"name": "a", "mode": "cluster", "limit": {"algorithm": "concurrency", "max": 5}, "batch": {"max": 5}}`, "rules[0].batch", "concurrency cannot be batched"},
		{"token bucket of burst 1", `{"name": "a", "mode": "cluster", "limit": {"algorithm": "token_bucket", "rate": 5, "burst": 1}, "batch": {"max": 5}}`, "rules[0].batch.max_age", "would leave less than 1 of the burst"},
		{"token bucket age too long", `{"name": "a", "mode": "cluster", "limit": {"algorithm": "token_bucket", "rate": 10, "burst": 10}, "batch": {"max": 5, "max_age": "1s"}}`, "rules[0].batch.max_age", "at most 900000 µs"},
		{"leaky bucket that delays", `{"name": "a", "mode": "cluster", "limit": {"algorithm": "leaky_bucket", "rate": 10, "burst": 10}, "batch": {"max": 5}}`, "rules[0].batch", "leaky_bucket cannot be batched: delay is below the burst, and batched mode needs nodelay"},
		{"sub-windows of a fraction of a µs", `{"name": "a", "mode": "cluster", "limit": {"algorithm": "sliding_window", "limit": 10, "window": "1m", "subwindows": 7}, "batch": {"max": 5}}`, "rules[0].batch", "sliding_window cannot be batched: subwindows must divide the window in µs (60000000)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errs := decode(t, `{"rules": [`+tt.rule+`]}`)
			if len(errs.List) != 1 {
				t.Fatalf("got %d errors, want 1 at %s:\n%v", len(errs.List), tt.path, errs.Err())
			}
			if e := errs.List[0]; e.Path != tt.path || !strings.Contains(e.Reason, tt.reason) {
				t.Errorf("error %s: %s\nwant    %s: ...%s...", e.Path, e.Reason, tt.path, tt.reason)
			}
		})
	}
}
