package rlqs

import (
	"net"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/redis/go-redis/v9"

	"github.com/diana-gw/diana/shared/rules"
)

// When Redis cannot be reached, on_error decides each bucket's assignment.
func TestOnError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0") // a port nothing answers on once closed
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	for _, tc := range []struct {
		policy rules.FailPolicy
		want   string
		rate   float64
	}{
		{rules.FailOpen, "allow_all", 0},
		{rules.FailClosed, "deny_all", 0},
		{rules.FailLocal, "token_bucket", 25}, // 100 a second divided by 4 nodes
	} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			c := redis.NewClient(&redis.Options{Addr: dead, MaxRetries: -1, DialTimeout: 100 * time.Millisecond})
			t.Cleanup(func() { c.Close() })
			clock := newClock()
			var sent []string
			failed := 0
			s := New(config(t, apiLimit(100)), Options{Now: clock.Now, Fleet: NewRedis(c, "d:", nil), OnError: tc.policy, Nodes: 4,
				Timeout: time.Second, Failed: func(error) { failed++ },
				Sent: func(a Action, why, _ string, _ *pb.BucketId) { sent = append(sent, a.String()+"/"+why) }})
			e := dialEnvoy(t, serve(t, s), "edge", clock)
			e.request(acme)
			if len(sent) != 1 || failed != 1 {
				t.Fatalf("sent %v, %d failures", sent, failed)
			}
			why := WhyOnError
			if tc.policy == rules.FailLocal {
				why = WhyLimit
			}
			if sent[0] != tc.want+"/"+why {
				t.Fatalf("sent %s, want %s/%s", sent[0], tc.want, why)
			}
			tb := e.buckets[key(acme)].strategy.GetTokenBucket()
			if got := float64(tb.GetTokensPerFill().GetValue()) / float64(max(1, tb.GetFillInterval().GetSeconds())); tb != nil && got != tc.rate {
				t.Fatalf("rate %v, want %v", got, tc.rate)
			}
		})
	}
}
