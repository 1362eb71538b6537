package rlqs

import (
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
)

const actionsConfig = `
domain: edge
descriptors:
  - key: name
    value: api
    rate_limit: {unit: minute, requests_per_unit: 600}
  - key: name
    value: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: name
    value: internal
    rate_limit: {unlimited: true}
  - key: name
    value: trial
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: path
    value: /files/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 7}
`

// Each kind of limit gets its action, and the first assignment of a bucket is the whole limit
// for a lone instance.
func TestActions(t *testing.T) {
	type sent struct{ action, why string }
	var got []sent
	clock := newClock()
	s := New(config(t, actionsConfig), Options{Now: clock.Now, AssignmentTTL: 5 * time.Second,
		Sent: func(a Action, why, domain string, _ *pb.BucketId) { got = append(got, sent{a.String(), why}) }})
	e := dialEnvoy(t, serve(t, s), "edge", clock)
	for _, tc := range []struct {
		bucket map[string]string
		want   sent
		check  [3]int64 // the token bucket's max_tokens, tokens_per_fill and fill_interval seconds
	}{
		{map[string]string{"name": "api"}, sent{"token_bucket", WhyLimit}, [3]int64{2, 1200, 120}}, // 600 a minute: 1200 every 2 minutes
		{map[string]string{"name": "blocked"}, sent{"deny_all", WhyLimit}, [3]int64{}},
		{map[string]string{"name": "internal"}, sent{"allow_all", WhyUnlimited}, [3]int64{}},
		{map[string]string{"name": "trial"}, sent{"allow_all", WhyShadow}, [3]int64{}},
		{map[string]string{"name": "other"}, sent{"allow_all", WhyNoLimit}, [3]int64{}},
		{map[string]string{"name": "api", "extra": "x"}, sent{"allow_all", WhyNoLimit}, [3]int64{}},
		{map[string]string{"path": "/files/a"}, sent{"token_bucket", WhyLimit}, [3]int64{2, 1001, 514800}}, // 7 an hour: 1001 every 143 hours
	} {
		got = nil
		e.request(tc.bucket)
		if len(got) != 1 || got[0] != tc.want {
			t.Errorf("%v: sent %v, want %v", tc.bucket, got, tc.want)
			continue
		}
		st := e.buckets[key(tc.bucket)].strategy
		tb := st.GetTokenBucket()
		if got := [3]int64{int64(tb.GetMaxTokens()), int64(tb.GetTokensPerFill().GetValue()), tb.GetFillInterval().GetSeconds()}; got != tc.check {
			t.Errorf("%v: token bucket %v, want %v", tc.bucket, got, tc.check)
		}
		if tc.want.action == "deny_all" && st.GetBlanketRule().String() != "DENY_ALL" {
			t.Errorf("%v: strategy %v", tc.bucket, st)
		}
	}
	// share_threshold: every value under /files/* is one fleet-wide limit.
	s.mu.Lock()
	groups := map[string]bool{}
	for st := range s.streams {
		for _, b := range st.buckets {
			if b.plan.action == TokenBucket {
				groups[b.plan.group] = true
			}
		}
	}
	s.mu.Unlock()
	e.request(map[string]string{"path": "/files/b"})
	s.mu.Lock()
	for st := range s.streams {
		for _, b := range st.buckets {
			if b.plan.action == TokenBucket && !groups[b.plan.group] {
				t.Errorf("bucket %v counts under a group of its own: %s", b.id.Bucket, b.plan.group)
			}
		}
	}
	s.mu.Unlock()

	// A bucket that reports no request for a minute is abandoned.
	got = nil
	for range 61 {
		clock.Add(time.Second)
		e.report()
	}
	e.mu.Lock()
	n := len(e.buckets)
	e.mu.Unlock()
	abandoned := 0
	for _, x := range got {
		if x == (sent{"abandon", WhyIdle}) {
			abandoned++
		}
	}
	if n != 0 || abandoned != 8 || s.Stats().Buckets != 0 {
		t.Fatalf("after a minute without requests: the instance holds %d buckets, %d abandoned, the service %d", n, abandoned, s.Stats().Buckets)
	}
}
