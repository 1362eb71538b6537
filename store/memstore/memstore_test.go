package memstore

import (
	"hash/maphash"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/diana-gw/diana/internal/algotest"
	"github.com/diana-gw/diana/shared/algos"
)

// clock is a fake clock tests move by hand.
type clock struct{ now atomic.Int64 }

func (c *clock) get() int64 { return c.now.Load() }

func newStore(max int) (*Store, *clock) {
	c := &clock{}
	c.now.Store(1_700_000_000_000_000)
	return New(Options{MaxEntries: max, Clock: c.get}), c
}

func gcra(t testing.TB, rate, period, burst int64) algos.Algorithm {
	g, err := algos.NewGCRA(rate, period, burst)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestDecideUsesClockAndKeepsState(t *testing.T) {
	s, c := newStore(0)
	g := gcra(t, 1, algos.Second, 2)
	want := []bool{true, true, false}
	for i, w := range want {
		if d := s.Decide("a", g, algos.Request{Cost: 1}); d.Allowed != w {
			t.Fatalf("request %d: %+v, want allowed=%v", i, d, w)
		}
	}
	if d := s.Decide("b", g, algos.Request{Cost: 1}); !d.Allowed {
		t.Fatalf("another key is limited too: %+v", d)
	}
	c.now.Add(algos.Second)
	if d := s.Decide("a", g, algos.Request{Cost: 1}); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("after 1 s: %+v, want one token", d)
	}
}

// TestConcurrentExact: goroutines racing on one key are admitted exactly up to the limit, for
// every algorithm.
func TestConcurrentExact(t *testing.T) {
	for _, l := range algotest.Exact() {
		t.Run(l.Name, func(t *testing.T) {
			s, _ := newStore(0) // the clock stands still: nothing refills
			admitted := algotest.Race(t, 32, 20, func(r algos.Request) (algos.Decision, error) {
				return s.Decide("hot", l.Alg, r), nil
			})
			if admitted != l.Admits {
				t.Fatalf("admitted %d of 640, want exactly %d", admitted, l.Admits)
			}
		})
	}
}

// TestNegativeCostTakesNothing: a negative cost is a peek, never a refund.
func TestNegativeCostTakesNothing(t *testing.T) {
	for _, l := range algotest.Exact() {
		s, _ := newStore(0)
		var admitted int64
		for i := range 2 * l.Admits {
			s.Decide("k", l.Alg, algos.Request{Cost: -5, ID: int64(i)})
			if s.Decide("k", l.Alg, algos.Request{Cost: 1, ID: int64(i) + 1000}).Allowed {
				admitted++
			}
		}
		if admitted != l.Admits {
			t.Errorf("%s: admitted %d with negative costs in between, want %d", l.Name, admitted, l.Admits)
		}
	}
}

// TestBounded: a million distinct keys never hold more than MaxEntries.
func TestBounded(t *testing.T) {
	s, _ := newStore(6400)
	g := gcra(t, 1, algos.Second, 5)
	buf := make([]byte, 0, 16)
	for i := range 1_000_000 {
		buf = strconv.AppendInt(buf[:0], int64(i), 10)
		s.Decide(string(buf), g, algos.Request{Cost: 1})
		if i%100_000 == 0 && s.Len() > 6400 {
			t.Fatalf("after %d keys the store holds %d entries, bound 6400", i, s.Len())
		}
	}
	if n := s.Len(); n > 6400 || n < 6000 {
		t.Fatalf("store holds %d entries, want close to the bound 6400", n)
	}
}

// TestExpiredGoFirst: when the store is full, expired entries make room before live ones.
// (16 long keys: a shard of 8 entries that drew 8 of them, all live, would have to evict one,
// which with 128 long keys happened in 16 runs of 200.)
func TestExpiredGoFirst(t *testing.T) {
	s, c := newStore(64 * 8)
	long := gcra(t, 1, algos.Hour, 1)    // a used key stays limited for an hour
	short := gcra(t, 1, algos.Second, 1) // its state expires after a second
	for i := range 16 {
		s.Decide("long"+strconv.Itoa(i), long, algos.Request{Cost: 1})
	}
	for i := range 64 * 6 {
		s.Decide("short"+strconv.Itoa(i), short, algos.Request{Cost: 1})
	}
	c.now.Add(2 * algos.Second)
	for i := range 64 * 5 {
		s.Decide("new"+strconv.Itoa(i), short, algos.Request{Cost: 1})
	}
	for i := range 16 {
		if d := s.Decide("long"+strconv.Itoa(i), long, algos.Request{Cost: 1}); d.Allowed {
			t.Fatalf("long%d lost its state to eviction while expired entries were there", i)
		}
	}
}

// TestIdleExpiry: an entry past its TTL decides as a fresh one.
func TestIdleExpiry(t *testing.T) {
	s, c := newStore(0)
	b, err := algos.NewBan(gcra(t, 1, algos.Second, 1), 10*algos.Second)
	if err != nil {
		t.Fatal(err)
	}
	s.Decide("k", b, algos.Request{Cost: 1})
	if d := s.Decide("k", b, algos.Request{Cost: 1}); d.Allowed || d.RetryAfter != 10*algos.Second {
		t.Fatalf("second request: %+v, want a 10 s ban", d)
	}
	c.now.Add(10*algos.Second - 1)
	if d := s.Decide("k", b, algos.Request{Cost: 1}); d.Allowed {
		t.Fatalf("admitted during the ban: %+v", d)
	}
	c.now.Add(1)
	if d := s.Decide("k", b, algos.Request{Cost: 1}); !d.Allowed {
		t.Fatalf("still denied after the ban and the refill: %+v", d)
	}
}

func TestZeroAllocs(t *testing.T) {
	s, _ := newStore(0)
	g := gcra(t, 1000, algos.Second, 1000)
	l, err := algos.NewSlidingLog(1000, algos.Second)
	if err != nil {
		t.Fatal(err)
	}
	s.Decide("key", g, algos.Request{Cost: 1})
	s.Decide("log", l, algos.Request{Cost: 500})
	s.Decide("log", l, algos.Request{Cost: 1, DryRun: true}) // grows the shard's scratch log
	for _, c := range []struct {
		name string
		alg  algos.Algorithm
		key  string
		r    algos.Request
	}{
		{"decision on a known key", g, "key", algos.Request{Cost: 1}},
		{"dry run on a known key", g, "key", algos.Request{Cost: 1, DryRun: true}},
		{"dry run on a new key", g, "new", algos.Request{Cost: 1, DryRun: true}},
		{"dry run on a log", l, "log", algos.Request{Cost: 1, DryRun: true}},
	} {
		if n := testing.AllocsPerRun(1000, func() { s.Decide(c.key, c.alg, c.r) }); n != 0 {
			t.Errorf("%s: %v allocations, want 0", c.name, n)
		}
	}
}

// TestDryRun: a dry run gets the decision the same request would get, and leaves the entry as it
// was (a denial starts no ban, a new key is not added), for every algorithm, bare and banned.
func TestDryRun(t *testing.T) {
	type limit struct {
		name string
		alg  algos.Algorithm
	}
	var limits []limit
	for _, l := range algotest.Exact() {
		ban, err := algos.NewBan(l.Alg, algos.Minute)
		if err != nil {
			t.Fatal(err)
		}
		limits = append(limits, limit{l.Name, l.Alg}, limit{l.Name + " banned", ban})
	}
	for _, l := range limits {
		t.Run(l.name, func(t *testing.T) {
			s, c := newStore(0)
			snapshot := func() (entry, bool) {
				h := maphash.String(s.seed, "k")
				e := s.shards[h&(shardCount-1)].find(h, "k")
				if e == nil {
					return entry{}, false
				}
				cp := *e
				cp.st.Log = slices.Clone(e.st.Log)
				return cp, true
			}
			// Each step asks the same request dry, then for real: a peek, a unit, a large
			// cost, and, past the limit, denials (which start the ban); then the clock moves
			// past the TTL of some states, and a dry run decides on the expired one.
			for i := range 110 {
				r := algos.Request{Cost: 1, ID: int64(i) + 1}
				switch {
				case i%10 == 3:
					r.Cost = 0
				case i == 7:
					r.Cost = 40
				case i == 100:
					c.now.Add(2 * algos.Hour)
				}
				before, held := snapshot()
				dry := r
				dry.DryRun = true
				got := s.Decide("k", l.alg, dry)
				after, stillHeld := snapshot()
				if held != stillHeld || !sameEntry(before, after) {
					t.Fatalf("step %d: the dry run changed the entry:\n  before %+v (held %v)\n  after  %+v (held %v)", i, before, held, after, stillHeld)
				}
				if want := s.Decide("k", l.alg, r); got != want {
					t.Fatalf("step %d %+v:\n  dry run %+v\n  real    %+v", i, r, got, want)
				}
			}
		})
	}
}

func sameEntry(a, b entry) bool {
	return a.expires == b.expires && a.st.W == b.st.W && a.st.Ban == b.st.Ban && slices.Equal(a.st.Log, b.st.Log)
}

// TestSweep drops exactly the expired entries.
func TestSweep(t *testing.T) {
	s, c := newStore(0)
	short := gcra(t, 1, algos.Second, 1)
	long := gcra(t, 1, algos.Hour, 1)
	for i := range 100 {
		s.Decide("short"+strconv.Itoa(i), short, algos.Request{Cost: 1})
		s.Decide("long"+strconv.Itoa(i), long, algos.Request{Cost: 1})
	}
	if n := s.Sweep(); n != 0 {
		t.Fatalf("swept %d live entries", n)
	}
	c.now.Add(algos.Second)
	if n := s.Sweep(); n != 100 {
		t.Fatalf("swept %d, want the 100 expired entries", n)
	}
	if n := s.Len(); n != 100 {
		t.Fatalf("%d entries left, want 100", n)
	}
	if d := s.Decide("long7", long, algos.Request{Cost: 1}); d.Allowed {
		t.Fatal("a live entry lost its state")
	}
}

// The store keeps a state as long as its algorithm needs it, bans included: a window outlives
// the ban it caused.
func TestMatchesTransition(t *testing.T) {
	s, c := newStore(0)
	decide := func(key string, alg algos.Algorithm, r algos.Request) algos.Decision {
		c.now.Store(r.Now)
		return s.Decide(key, alg, r)
	}
	algotest.BanKeepsWindow(t, decide)
	algotest.MatchTransition(t, decide, true)
}

// TestFloodKeepsBans: a flood of distinct identities through a full store, whose states live
// longer than a ban's, does not lift the ban: eviction never hands a banned identity fresh
// capacity while unbanned entries can make room.
func TestFloodKeepsBans(t *testing.T) {
	s, c := newStore(64 * 8)
	banned, err := algos.NewBan(gcra(t, 1, algos.Hour, 1), 10*algos.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 64 {
		key := "victim" + strconv.Itoa(i)
		s.Decide(key, banned, algos.Request{Cost: 1})
		if d := s.Decide(key, banned, algos.Request{Cost: 1}); d.Allowed {
			t.Fatalf("%s: second request admitted, want the ban to start", key)
		}
	}
	// The flood's states last a day, longer than the bans: a victim would be the closest to
	// expiry in every sample it is in.
	flood := gcra(t, 1, algos.Day, 1)
	for i := range 64 * 8 * 20 {
		c.now.Add(algos.Millisecond)
		s.Decide("flood"+strconv.Itoa(i), flood, algos.Request{Cost: 1})
	}
	for i := range 64 {
		if d := s.Decide("victim"+strconv.Itoa(i), banned, algos.Request{Cost: 1}); d.Allowed {
			t.Fatalf("victim%d admitted after a flood of %d identities: the flood lifted its ban", i, 64*8*20)
		}
	}
	if ev := s.Stats().Evicted; ev < 64*8*19 {
		t.Errorf("Stats().Evicted = %d, want at least %d (the flood's live entries made room for each other)", ev, 64*8*19)
	}
}

// TestDefaultClock: without Options.Clock, the store's clock is in µs, starts at the wall
// clock's time and follows the time that passes.
func TestDefaultClock(t *testing.T) {
	before := time.Now()
	s := New(Options{})
	start := s.Now()
	if wall := before.UnixMicro(); start < wall || start > wall+int64(time.Second/time.Microsecond) {
		t.Fatalf("the clock starts at %d µs, the wall clock was at %d µs", start, wall)
	}
	time.Sleep(20 * time.Millisecond)
	passed := time.Duration(s.Now()-start) * time.Microsecond
	if took := time.Since(before); passed < 20*time.Millisecond || passed > took {
		t.Fatalf("the clock moved %v over a sleep of 20ms that took %v in all", passed, time.Since(before))
	}
}
