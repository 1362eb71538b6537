package failover

import (
	"context"
	"testing"
	"time"

	"github.com/diana-gw/diana/internal/redistest"
	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/batch"
	"github.com/diana-gw/diana/store/redisstore"
)

// Decisions a batching backend makes from units it already holds say nothing about Redis: they
// neither close the breaker nor count as round trips, so a dead Redis still opens it.
func TestBatchedUnitsSayNothing(t *testing.T) {
	srv := redistest.Start(t)
	var trips int
	s := New(batch.New(redisstore.New(srv.Client(), redisstore.Options{}), batch.Options{}),
		Options{Failures: 3, OpenFor: time.Minute, Observe: func(time.Duration, error) { trips++ }})
	fw := must(algos.NewFixedWindow(100, algos.Hour))
	b, err := fw.(algos.Batcher).Batching(time.Hour.Microseconds())
	if err != nil {
		t.Fatal(err)
	}
	batched := &rules.Batched{Algorithm: fw, Batching: b, Min: 50, Max: 50}
	decide := func(key string, alg algos.Algorithm) *rules.Op {
		b, _ := alg.(*rules.Batched)
		op := &rules.Op{Key: key, Alg: alg, Req: algos.Request{Cost: 1}, OnError: rules.FailClosed, Batch: b}
		s.Decide(context.Background(), []*rules.Op{op})
		return op
	}
	if op := decide("batched", batched); !op.Dec.Allowed || op.Err != nil || trips != 1 {
		t.Fatalf("first request takes a batch: %+v, %v, %d round trips", op.Dec, op.Err, trips)
	}
	srv.Stop()
	for i := range 3 {
		if op := decide("batched", batched); !op.Dec.Allowed || op.Err != nil {
			t.Fatalf("batched unit %d: %+v, %v", i, op.Dec, op.Err)
		}
		if op := decide("plain", fw); op.Err == nil || op.Dec.Allowed {
			t.Fatalf("plain request %d with Redis down: %+v, %v", i, op.Dec, op.Err)
		}
	}
	if !s.Open() {
		t.Fatal("three failed round trips between batched decisions did not open the breaker")
	}
	if trips != 4 {
		t.Fatalf("observed %d round trips, want 4 (the batch and three failures)", trips)
	}
}
