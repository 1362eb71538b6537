package batch_test

import (
	"context"
	"testing"

	"github.com/diana-gw/diana/internal/redistest"
	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/batch"
	"github.com/diana-gw/diana/store/redisstore"
)

// trips is a store that counts the round trips and the calls sent through it.
type trips struct {
	next          rules.Store
	trips, scalls int
}

func (b *trips) Decide(ctx context.Context, calls []*rules.Op) {
	b.trips++
	b.scalls += len(calls)
	b.next.Decide(ctx, calls)
}

// count reads the fixed window's count of key in Redis, and the window it counts in.
func count(t *testing.T, rs *redisstore.Store, key string, alg algos.Algorithm) (ws, n int64) {
	t.Helper()
	st, err := rs.State(context.Background(), key, alg)
	if err != nil {
		t.Fatal(err)
	}
	return st.W[0], st.W[1]
}

// TestRefundOnExpiry: units a node did not spend in their life go back to Redis in front of the
// node's next call, in the same round trip, where another node's batch then finds them; on Close
// the node gives back all it holds, and decides in Redis from then on.
func TestRefundOnExpiry(t *testing.T) {
	const s = algos.Second
	srv := redistest.Start(t)
	rs := redisstore.New(srv.Client(), redisstore.Options{CallerClock: true})
	r := rule(t, `{"algorithm":"fixed_window","limit":10,"window":"10s"}`, `{"max":10,"min":10,"max_age":"1s"}`)
	clk := &clock{}
	clk.t.Store(1_000 * s)
	ta, tb := &trips{next: rs}, &trips{next: rs}
	a := batch.New(ta, batch.Options{Now: clk.now})
	b := batch.New(tb, batch.Options{Now: clk.now})
	batchAlg := batchAlgOf(t, r.Alg)
	// The refund script is loaded first: a call that meets NOSCRIPT is sent again after the
	// others of its round trip, and this test counts on the refund going ahead of the batch.
	if _, err := rs.DecideOne(context.Background(), "warm-up", r.Alg.(*rules.Batched).Batching.Refund(1), algos.Request{Now: clk.now()}); err != nil {
		t.Fatal(err)
	}

	if c := decide(a, r.Alg, "k", clk.now(), false); !c.Dec.Allowed {
		t.Fatalf("first request: %+v", c)
	}
	if _, n := count(t, rs, "k", batchAlg); n != 10 {
		t.Fatalf("count %d after a's batch, want 10", n)
	}
	clk.t.Add(1500 * algos.Millisecond) // a's 9 units expired
	if c := decide(b, r.Alg, "k", clk.now(), false); c.Dec.Allowed {
		t.Fatalf("b admitted while a's expired units are not back yet: %+v", c)
	}
	// b touched the key, not a: a's units go back with a's next call, in its round trip.
	before := ta.trips
	if c := decide(a, r.Alg, "k", clk.now(), false); !c.Dec.Allowed {
		t.Fatalf("a refused after giving its units back: %+v %+v trips %d calls %d", c, a.Stats(), ta.trips, ta.scalls)
	}
	if ta.trips != before+1 || ta.scalls != 3 {
		t.Fatalf("a: %d round trips, %d calls; want 1 more round trip, 3 calls (a batch, a refund, a batch)", ta.trips-before, ta.scalls)
	}
	st := a.Stats()
	if st.Expired != 9 || st.Returned != 9 || st.Spent != 2 {
		t.Fatalf("a: %+v, want 9 expired and returned, 2 spent", st)
	}
	if _, n := count(t, rs, "k", batchAlg); n != 10 {
		t.Fatalf("count %d, want 10: 1 spent, 9 back and granted again", n)
	}
	// a holds 8: Close gives them back and the count is what was spent.
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, n := count(t, rs, "k", batchAlg); n != 2 {
		t.Fatalf("count %d after Close, want 2", n)
	}
	if st := a.Stats(); st.Returned != 17 {
		t.Fatalf("a after Close: %+v, want 17 returned", st)
	}
	// After Close, a decides in Redis, one by one.
	if c := decide(a, r.Alg, "k", clk.now(), false); !c.Dec.Allowed || c.Cached {
		t.Fatalf("after Close: %+v", c)
	}
	if _, n := count(t, rs, "k", batchAlg); n != 3 {
		t.Fatalf("count %d after a direct request, want 3", n)
	}
}

// TestRefundNotAcrossWindows is the adversary of refunds: node a holds units of one window when
// it ends; node b fills the next window; a's units come back after the roll and must not be
// credited to b's window, which would let the cluster pass more than the limit in it.
func TestRefundNotAcrossWindows(t *testing.T) {
	const s = algos.Second
	srv := redistest.Start(t)
	rs := redisstore.New(srv.Client(), redisstore.Options{CallerClock: true})
	r := rule(t, `{"algorithm":"fixed_window","limit":10,"window":"1s"}`, `{"max":10,"min":10}`)
	batchAlg := batchAlgOf(t, r.Alg)
	clk := &clock{}
	clk.t.Store(1_000*s + 900*algos.Millisecond)
	a := batch.New(rs, batch.Options{Now: clk.now})
	b := batch.New(rs, batch.Options{Now: clk.now})
	if c := decide(a, r.Alg, "k", clk.now(), false); !c.Dec.Allowed {
		t.Fatal(c)
	}
	clk.t.Store(1_001*s + 100*algos.Millisecond) // the next window
	admitted := 0
	for range 10 {
		if c := decide(b, r.Alg, "k", clk.now(), false); c.Dec.Allowed {
			admitted++
		}
	}
	if admitted != 10 {
		t.Fatalf("b admitted %d of the next window's 10", admitted)
	}
	// a's 9 units of the last window expired; their refund goes ahead of a's new batch.
	for range 5 {
		if c := decide(a, r.Alg, "k", clk.now(), false); c.Dec.Allowed {
			admitted++
		}
	}
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if c := decide(b, r.Alg, "k", clk.now(), false); c.Dec.Allowed {
			admitted++
		}
	}
	if admitted != 10 {
		t.Fatalf("the cluster admitted %d in a window of 10", admitted)
	}
	if ws, n := count(t, rs, "k", batchAlg); ws != 1_001*s || n != 10 {
		t.Fatalf("window %d count %d, want %d and 10", ws, n, 1_001*s)
	}
	if st := a.Stats(); st.Expired != 9 || st.Returned != 0 {
		t.Fatalf("a: %+v, want 9 expired, none taken back", st)
	}
}

// TestRefundSlidingLogOnClose: a node's held sliding-log units leave the log when it closes.
func TestRefundSlidingLogOnClose(t *testing.T) {
	const s = algos.Second
	srv := redistest.Start(t)
	rs := redisstore.New(srv.Client(), redisstore.Options{CallerClock: true})
	r := rule(t, `{"algorithm":"sliding_log","limit":10,"window":"1s"}`, `{"max":10,"min":10}`)
	clk := &clock{}
	clk.t.Store(1_000 * s)
	a := batch.New(rs, batch.Options{Now: clk.now})
	for range 3 {
		if c := decide(a, r.Alg, "k", clk.now(), false); !c.Dec.Allowed {
			t.Fatal(c)
		}
	}
	st, err := rs.State(context.Background(), "k", batchAlgOf(t, r.Alg))
	if err != nil || len(st.Log) != 10 {
		t.Fatalf("log %v, %v; want 10 entries", st.Log, err)
	}
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st, err = rs.State(context.Background(), "k", batchAlgOf(t, r.Alg)); err != nil || len(st.Log) != 3 {
		t.Fatalf("log %v, %v after Close; want the 3 spent", st.Log, err)
	}
}

// batchAlgOf is the algorithm a batched rule takes its batches with, whose state Redis keeps.
func batchAlgOf(t *testing.T, alg algos.Algorithm) algos.Algorithm {
	t.Helper()
	b, ok := alg.(*rules.Batched)
	if !ok {
		t.Fatalf("%T is not batched", alg)
	}
	return b.Batching.Alg
}

// TestFlush: units that expired on a node that sees no more traffic go back with Flush, within
// their window, where waiting for the node's next round trip would have lost them.
func TestFlush(t *testing.T) {
	const s = algos.Second
	srv := redistest.Start(t)
	rs := redisstore.New(srv.Client(), redisstore.Options{CallerClock: true})
	r := rule(t, `{"algorithm":"fixed_window","limit":10,"window":"60s"}`, `{"max":10,"min":10,"max_age":"1s"}`)
	batchAlg := batchAlgOf(t, r.Alg)
	clk := &clock{}
	clk.t.Store(1_000 * 60 * s)
	a := batch.New(rs, batch.Options{Now: clk.now})
	for range 3 {
		if c := decide(a, r.Alg, "k", clk.now(), false); !c.Dec.Allowed {
			t.Fatal(c)
		}
	}
	if err := a.Flush(context.Background()); err != nil { // nothing expired yet
		t.Fatal(err)
	}
	if _, n := count(t, rs, "k", batchAlg); n != 10 {
		t.Fatalf("count %d before expiry, want 10", n)
	}
	clk.t.Add(2 * s)
	if err := a.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, n := count(t, rs, "k", batchAlg); n != 3 {
		t.Fatalf("count %d after Flush, want the 3 spent", n)
	}
	if st := a.Stats(); st.Expired != 7 || st.Returned != 7 || st.Batches != 1 {
		t.Fatalf("%+v: want 1 batch, 7 expired and returned", st)
	}
}
