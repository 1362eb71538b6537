package redisstore

import (
	"context"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/diana-gw/diana/internal/redistest"
	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/rules"
)

// A write-back is the algorithm's own partial decision, applied once per marker: on every
// algorithm it leaves Redis's state as the Go transition leaves the same state, and a retry
// with the same marker changes nothing. A write-back never starts a ban.
func TestWriteBack(t *testing.T) {
	srv := redistest.Start(t)
	s := New(srv.Client(), Options{CallerClock: true})
	ctx := context.Background()
	must := func(a algos.Algorithm, err error) algos.Algorithm {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	gcra := must(algos.NewGCRA(10, algos.Minute, 10))
	for i, alg := range []algos.Algorithm{
		must(algos.NewFixedWindow(10, algos.Minute)),
		must(algos.NewCounter(algos.Minute)),
		must(algos.NewSlidingWindow(10, algos.Minute)),
		must(algos.NewSlidingWindowSub(10, algos.Minute, 2)),
		must(algos.NewSlidingWindowSub(10, algos.Minute, 6)),
		must(algos.NewSlidingLog(10, algos.Minute)),
		gcra,
		must(algos.NewWarmUp(10, algos.Minute, algos.Minute)),
		must(algos.NewLeakyBucket(10, algos.Minute, 9, algos.NoDelay)),
		must(algos.NewBan(gcra, algos.Hour)),
	} {
		name := strconv.Itoa(i) + "-" + alg.Script().Name
		if alg.Script().Ban != 0 {
			name += "+ban"
		}
		t.Run(name, func(t *testing.T) {
			key := "wb:" + name
			now := int64(1_700_000_000_000_000)
			var st algos.State
			for i := range 3 { // some traffic first, as Redis decided it before the outage
				now += algos.Second
				r := algos.Request{Now: now, Cost: 1}
				want := alg.Decide(&st, r)
				want.TTL = 0 // the store's, not in the reply
				got, err := s.DecideOne(ctx, key, alg, r)
				if err != nil || got != want {
					t.Fatalf("request %d: Redis %+v, %v; Go %+v", i, got, err, want)
				}
			}
			check := func(what string, want algos.State) {
				t.Helper()
				got, err := s.State(ctx, key, alg)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("%s: Redis holds %+v, Go %+v", what, got, want)
				}
			}
			wb := alg // what a write-back decides with: a ban's algorithm alone
			if b, ok := alg.(*algos.Ban); ok {
				wb = b.Inner()
			}
			for i, units := range []int64{4, 20, 5} { // within what remains, beyond it (saturates), none left
				now += algos.Second
				marker := "node-a:" + strconv.Itoa(i)
				want := wb.Decide(&st, algos.Request{Now: now, Cost: units, Partial: true})
				want.TTL = 0
				for try := range 2 {
					op := &rules.Op{Key: key, Alg: alg, Req: algos.Request{Now: now, Cost: units}}
					s.WriteBack(ctx, []Back{{Op: op, Marker: marker}})
					if op.Err != nil {
						t.Fatalf("write-back %d, try %d: %v", i, try, op.Err)
					}
					if try == 0 && op.Dec != want {
						t.Fatalf("write-back %d of %d units: Redis %+v, Go %+v", i, units, op.Dec, want)
					}
					if try == 1 && op.Dec != (algos.Decision{}) {
						t.Fatalf("write-back %d retried with its marker: %+v, want nothing charged", i, op.Dec)
					}
					check("after write-back "+strconv.Itoa(i)+", try "+strconv.Itoa(try), st)
				}
			}
		})
	}
}

// A write-back Ago µs back counts from then: a sliding log records its units Ago before Redis's
// TIME, or, on the caller's clock, at Req.Now − Ago.
func TestWriteBackAgo(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	sl, err := algos.NewSlidingLog(10, algos.Minute)
	if err != nil {
		t.Fatal(err)
	}
	const ago = 30 * algos.Second
	for _, caller := range []bool{false, true} {
		s := New(srv.Client(), Options{CallerClock: caller, Prefix: "ago-" + strconv.FormatBool(caller) + ":"})
		before := time.Now().UnixMicro()
		op := &rules.Op{Key: "k", Alg: sl, Req: algos.Request{Now: before, Cost: 2}}
		s.WriteBack(ctx, []Back{{Op: op, Marker: "m", Ago: ago}})
		after := time.Now().UnixMicro()
		if op.Err != nil || op.Dec.Granted != 2 {
			t.Fatalf("caller clock %v: %+v, %v", caller, op.Dec, op.Err)
		}
		st, err := s.State(ctx, "k", sl)
		if err != nil {
			t.Fatal(err)
		}
		lo, hi := before-ago-algos.Second, after-ago+algos.Second // Redis's clock, this machine's
		if caller {
			lo, hi = before-ago, before-ago
		}
		if len(st.Log) != 2 || st.Log[0] < lo || st.Log[1] > hi {
			t.Fatalf("caller clock %v: log %v, want 2 entries in [%d, %d]", caller, st.Log, lo, hi)
		}
	}
}

// A backdated write-back goes into a sliding log at its time, before later entries (another
// node's write-back), as the Go twin puts it; a plain request still records no earlier than
// the newest entry.
func TestWriteBackBackdated(t *testing.T) {
	srv := redistest.Start(t)
	s := New(srv.Client(), Options{CallerClock: true})
	ctx := context.Background()
	sl, err := algos.NewSlidingLog(10, algos.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t0 := int64(1_700_000_000_000_000)
	var st algos.State
	for i := range 3 {
		r := algos.Request{Now: t0 + int64(i)*10*algos.Second, Cost: 1}
		sl.Decide(&st, r)
		if _, err := s.DecideOne(ctx, "k", sl, r); err != nil {
			t.Fatal(err)
		}
	}
	for i, back := range []bool{true, false} {
		now := t0 + 25*algos.Second
		want := sl.Decide(&st, algos.Request{Now: now - 20*algos.Second, Cost: 2, Partial: true, Backdated: back})
		want.TTL = 0
		op := &rules.Op{Key: "k", Alg: sl, Req: algos.Request{Now: now, Cost: 2, Backdated: back}}
		s.WriteBack(ctx, []Back{{Op: op, Marker: "m" + strconv.Itoa(i), Ago: 20 * algos.Second}})
		if op.Err != nil || op.Dec != want {
			t.Fatalf("backdated %v: Redis %+v, %v; Go %+v", back, op.Dec, op.Err, want)
		}
		got, err := s.State(ctx, "k", sl)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, st) {
			t.Fatalf("backdated %v: Redis holds %v, Go %v", back, got.Log, st.Log)
		}
		if back && (st.Log[1] != t0+5*algos.Second || st.Log[2] != t0+5*algos.Second) {
			t.Fatalf("backdated: log %v, want the 2 units at +5s, second and third", st.Log)
		}
	}
}
