package failover

import (
	"context"
	"errors"
	"testing"

	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/redisstore"
)

// A request's limits decided together while Redis is up are Redis's, one round trip; while it is
// down, each takes its fail policy's decision, all or nothing: a FailClosed limit refuses the
// request and the FailLocal limits beside it take nothing in process memory; without it, they
// are committed there; a FailLocal denial with a ban starts its ban there.
func TestDecideTogether(t *testing.T) {
	r := newRig(t, Options{Failures: 1, OpenFor: wait}, redisstore.Options{})
	ctx := context.Background()
	fw := must(algos.NewFixedWindow(2, algos.Hour))
	banned := must(algos.NewBan(must(algos.NewFixedWindow(1, algos.Hour)), algos.Hour))
	ops := func(prefix string, policies ...rules.FailPolicy) []*rules.Op {
		o := make([]*rules.Op, len(policies))
		for i, p := range policies {
			o[i] = &rules.Op{Key: prefix + string(rune('a'+i)), Alg: fw, Req: algos.Request{Cost: 1}, OnError: p}
		}
		return o
	}
	r.s.DecideTogether(ctx, ops("warm", rules.FailOpen, rules.FailOpen), false) // connects, loads the script
	up := ops("up", rules.FailLocal, rules.FailOpen)
	before := r.sent.n.Load()
	r.s.DecideTogether(ctx, up, false)
	for _, op := range up {
		if op.Err != nil || !op.Dec.Allowed || op.Req.DryRun {
			t.Fatalf("Redis up: %s: %+v %v, committed %v", op.Key, op.Dec, op.Err, !op.Req.DryRun)
		}
	}
	if n := r.sent.n.Load() - before; n != 1 {
		t.Errorf("a request of 2 limits made %d round trips, want 1", n)
	}

	r.srv.Stop()
	// FailClosed refuses: the FailLocal limit beside it is a dry run in memory.
	closed := ops("down", rules.FailLocal, rules.FailClosed)
	r.s.DecideTogether(ctx, closed, false)
	if !closed[0].Dec.Allowed || !closed[0].Req.DryRun || closed[1].Dec.Allowed || closed[0].Err == nil {
		t.Errorf("Redis down, a closed limit: local %+v committed %v, closed %+v", closed[0].Dec, !closed[0].Req.DryRun, closed[1].Dec)
	}
	if !r.s.Open() {
		t.Fatal("the breaker did not open")
	}
	// Open and local admit: the local limit is committed, twice, then refuses.
	for i := range 3 {
		o := ops("down", rules.FailLocal, rules.FailOpen)
		r.s.DecideTogether(ctx, o, false)
		if o[0].Dec.Allowed != (i < 2) || o[0].Req.DryRun != (i == 2) || !errors.Is(o[0].Err, ErrOpen) {
			t.Errorf("breaker open, request %d: local %+v committed %v err %v", i, o[0].Dec, !o[0].Req.DryRun, o[0].Err)
		}
		if o[1].Req.DryRun != (i == 2) {
			t.Errorf("breaker open, request %d: the open limit committed %v, want %v", i, !o[1].Req.DryRun, i < 2)
		}
	}
	// Refused elsewhere: nothing is committed but a local denial's ban.
	b := []*rules.Op{
		{Key: "ban", Alg: banned, Req: algos.Request{Cost: 2}, OnError: rules.FailLocal},
		{Key: "downc", Alg: fw, Req: algos.Request{Cost: 1}, OnError: rules.FailLocal},
	}
	r.s.DecideTogether(ctx, b, true)
	if b[0].Dec.Allowed || b[0].Req.DryRun || !b[1].Dec.Allowed || !b[1].Req.DryRun {
		t.Errorf("refused elsewhere: ban %+v committed %v; other %+v committed %v", b[0].Dec, !b[0].Req.DryRun, b[1].Dec, !b[1].Req.DryRun)
	}
	peek := []*rules.Op{{Key: "ban", Alg: banned, Req: algos.Request{}, OnError: rules.FailLocal}}
	r.s.Decide(ctx, peek)
	if peek[0].Dec.Allowed || peek[0].Dec.RetryAfter <= 0 {
		t.Errorf("the local ban did not start: a peek got %+v", peek[0].Dec)
	}
}
