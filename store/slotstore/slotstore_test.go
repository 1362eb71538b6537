package slotstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/diana-gw/diana/internal/algotest"
	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/rules"
)

// mapData is Data with Envoy's semantics: a Set with cas 0, or on a missing key, stores
// unconditionally; CAS values are never 0. before, if set, runs before each Set: another
// worker's write between our Get and Set.
type mapData struct {
	vals   map[string][]byte
	cases  map[string]uint32
	next   uint32
	sets   int
	before func(key string) error
}

func newData() *mapData { return &mapData{vals: map[string][]byte{}, cases: map[string]uint32{}} }

func (d *mapData) Get(key string) ([]byte, uint32, error) {
	v, ok := d.vals[key]
	if !ok {
		return nil, 0, ErrNotFound
	}
	return append([]byte(nil), v...), d.cases[key], nil
}

func (d *mapData) Set(key string, v []byte, cas uint32) error {
	d.sets++
	if d.before != nil {
		if err := d.before(key); err != nil {
			return err
		}
	}
	if _, ok := d.vals[key]; ok && cas != 0 && d.cases[key] != cas {
		return ErrCasMismatch
	}
	d.next++
	d.vals[key], d.cases[key] = append([]byte(nil), v...), d.next
	return nil
}

func newStore(d Data, now *int64, slots, entries int) *Store {
	s := &Store{Data: d, Now: func() int64 { return *now }, Slots: slots, Entries: entries, Retries: 4}
	var err error
	if s.Key, err = LoadKey(d, func(b []byte) error {
		for i := range b {
			b[i] = byte(rand.Uint32())
		}
		return nil
	}); err != nil {
		panic(err)
	}
	return s
}

// decide decides one request of cost 1 for identity id of rule at now.
func decide(s *Store, rule, id string, alg algos.Algorithm, now int64) (algos.Decision, error) {
	op := &rules.Op{Key: rule + "|" + id, Alg: alg, Req: algos.Request{Now: now, Cost: 1}}
	s.Decide(context.Background(), []*rules.Op{op})
	return op.Dec, op.Err
}

const t0 = 472_222 * algos.Hour // a window starts here

func must(a algos.Algorithm, err error) algos.Algorithm {
	if err != nil {
		panic(err)
	}
	return a
}

// The store keeps a state as long as its algorithm needs it, bans included: every algorithm's
// transitions come out as in process memory, a window outlives the ban it caused, and a banned
// client is told the real wait.
func TestMatchesTransition(t *testing.T) {
	var now int64
	s := newStore(newData(), &now, 16, 8)
	decide := func(key string, alg algos.Algorithm, r algos.Request) algos.Decision {
		now = r.Now
		op := &rules.Op{Key: key, Alg: alg, Req: r}
		s.Decide(context.Background(), []*rules.Op{op})
		if op.Err != nil {
			t.Fatal(op.Err)
		}
		return op.Dec
	}
	algotest.BanKeepsWindow(t, decide)
	algotest.MatchTransition(t, decide, false)
}

// A write by another worker between our Get and Set makes our Set fail its CAS; the retry
// decides on the other worker's state, so no admission is lost.
func TestCASRace(t *testing.T) {
	d := newData()
	now := t0
	alg := must(algos.NewFixedWindow(3, algos.Hour))
	s, other := newStore(d, &now, 1, 4), newStore(d, &now, 1, 4)
	d.before = func(string) error {
		d.before = nil
		if dec, err := decide(other, "r", "c", alg, now); err != nil || !dec.Allowed {
			t.Errorf("the other worker: %+v, %v", dec, err)
		}
		return nil
	}
	if dec, err := decide(s, "r", "c", alg, now); err != nil || !dec.Allowed || dec.Remaining != 1 {
		t.Fatalf("first request (the race on the slot's creation): %+v, %v; want allowed with 1 remaining (the other worker took one)", dec, err)
	}
	if dec, _ := decide(s, "r", "c", alg, now); !dec.Allowed {
		t.Fatal("third admission refused")
	}
	if dec, _ := decide(s, "r", "c", alg, now); dec.Allowed {
		t.Fatal("fourth admission allowed")
	}
	// The same race on an existing slot.
	d.before = func(string) error {
		d.before = nil
		if dec, err := decide(other, "r", "e", alg, now); err != nil || !dec.Allowed {
			t.Errorf("the other worker: %+v, %v", dec, err)
		}
		return nil
	}
	if dec, err := decide(s, "r", "e", alg, now); err != nil || !dec.Allowed || dec.Remaining != 1 {
		t.Fatalf("on an existing slot: %+v, %v; want allowed with 1 remaining", dec, err)
	}
}

// Retries are bounded: when every Set loses, the request is denied (an admission that cannot be
// stored would be free), with ErrContended, and Contended counts it; a denial writes nothing.
func TestContended(t *testing.T) {
	d := newData()
	now := t0
	alg := must(algos.NewFixedWindow(1, algos.Hour))
	s := newStore(d, &now, 1, 4)
	contended := 0
	s.Contended = func() { contended++ }
	if dec, err := decide(s, "r", "z", alg, now); err != nil || !dec.Allowed { // creates the slot
		t.Fatalf("first request: %+v, %v", dec, err)
	}
	fails := 3
	d.before = func(string) error {
		if fails > 0 {
			fails--
			return ErrCasMismatch
		}
		return nil
	}
	if dec, err := decide(s, "r", "a", alg, now); err != nil || !dec.Allowed {
		t.Fatalf("after 3 mismatches of 4 attempts: %+v, %v; want allowed", dec, err)
	}
	fails, d.sets = 1<<30, 0
	if dec, err := decide(s, "r", "a", alg, now); err != nil || dec.Allowed || d.sets != 0 {
		t.Fatalf("second request: %+v, %v, %d sets; want a denial that writes nothing", dec, err, d.sets)
	}
	dec, err := decide(s, "r", "b", alg, now)
	if !errors.Is(err, ErrContended) || dec.Allowed || contended != 1 || d.sets != 4 {
		t.Errorf("every set lost: %+v, %v, Contended %d times, %d sets; want a denial, ErrContended, 1, 4", dec, err, contended, d.sets)
	}
}

// An attacker who knows the hash key picks identities that all fall in one slot: each still
// gets no more than the limit, and all of them together no more than Entries + 1 clients would.
// Without the overflow state (evicting the entry expiring first, as before), 100 such
// identities got 100 × the limit.
func TestCollidingIdentities(t *testing.T) {
	const slots, entries, limit, n = 64, 4, 5, 100
	now := t0
	s := newStore(newData(), &now, slots, entries)
	overflowed := 0
	s.Overflowed = func() { overflowed++ }
	alg := must(algos.NewFixedWindow(limit, algos.Hour))
	var ids []string
	for i := 0; len(ids) < n; i++ {
		id := "198.51." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256)
		if s.Hash("r|"+id)%slots == 7 {
			ids = append(ids, id)
		}
	}
	total := 0
	for round := 0; round < 2*limit; round++ {
		for _, id := range ids {
			now += algos.Millisecond
			dec, err := decide(s, "r", id, alg, now)
			if err != nil {
				t.Fatal(err)
			}
			if dec.Allowed {
				total++
			}
		}
	}
	if max := (entries + 1) * limit; total > max {
		t.Errorf("%d identities in one slot got %d admissions, want at most (entries+1) × limit = %d", n, total, max)
	}
	if total < limit {
		t.Errorf("only %d admissions: the slot denies more than one client's limit", total)
	}
	if overflowed == 0 {
		t.Error("Overflowed never called")
	}
	t.Logf("%d identities in one slot: %d admissions (an exact store: %d; the bound: %d); %d decisions on the overflow state",
		n, total, n*limit, (entries+1)*limit, overflowed)
}

// Churn: many more identities than the store holds, over many windows, in random order, with
// random gaps. No identity ever gets more than the limit in a window, nor the token bucket's
// burst + rate × time; all together get no more than Slots × (Entries + 1) clients would.
func TestChurn(t *testing.T) {
	const slots, entries, ids = 4, 3, 500
	for _, tc := range []struct {
		name string
		alg  algos.Algorithm
	}{
		{"fixed window 3 per second", must(algos.NewFixedWindow(3, algos.Second))},
		{"sliding window 3 per second", must(algos.NewSlidingWindow(3, algos.Second))},
		{"token bucket 3, 3 per second", must(algos.NewGCRA(3, algos.Second, 3))},
		{"leaky bucket 3 per second", must(algos.NewLeakyBucket(3, algos.Second, 2, algos.NoDelay))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			now := t0
			s := newStore(newData(), &now, slots, entries)
			admitted := map[string][]int64{}
			for i := 0; i < 100_000; i++ {
				now += rng.Int64N(200) // 50 µs on average: about 20,000 requests per second
				id := strconv.Itoa(rng.IntN(ids))
				dec, err := decide(s, "r", id, tc.alg, now)
				if err != nil {
					t.Fatal(err)
				}
				if dec.Allowed {
					admitted[id] = append(admitted[id], now)
				}
			}
			var all []int64
			for id, at := range admitted {
				all = append(all, at...)
				// 3 per second, and a sliding window's weighted estimate lets through at most
				// twice that in a sliding second: every algorithm here stays within 6.
				if n := maxInWindow(at, algos.Second); n > 6 {
					t.Fatalf("identity %s got %d admissions within a second, want at most 6", id, n)
				}
				if n := maxInWindow(at, 10*algos.Second); n > 3+30+3 {
					t.Fatalf("identity %s got %d admissions within 10 s, want at most 36", id, n)
				}
			}
			sortInts(all)
			if n, max := maxInWindow(all, algos.Second), 2*slots*(entries+1)*3; n > max {
				t.Errorf("all identities: %d admissions within a second, want at most %d", n, max)
			}
			t.Logf("%d admissions of 100,000 requests from %d identities; at most %d within a second",
				len(all), ids, maxInWindow(all, algos.Second))
		})
	}
}

// maxInWindow returns the most times of at (sorted) within any span of w.
func maxInWindow(at []int64, w int64) int {
	best, j := 0, 0
	for i := range at {
		for at[i]-at[j] >= w {
			j++
		}
		best = max(best, i-j+1)
	}
	return best
}

func sortInts(a []int64) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j] < a[j-1]; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}

// A state is dropped only once at rest: a full slot of live entries sends newcomers to the
// overflow state, and an entry whose window has passed makes room.
func TestEntriesAtRest(t *testing.T) {
	now := t0
	s := newStore(newData(), &now, 1, 2)
	alg := must(algos.NewFixedWindow(1, algos.Minute))
	req := func(id string) bool {
		dec, err := decide(s, "r", id, alg, now)
		if err != nil {
			t.Fatal(err)
		}
		return dec.Allowed
	}
	if !req("a") || !req("b") {
		t.Fatal("the first two clients were refused")
	}
	if req("a") || req("b") {
		t.Fatal("a second request in the window was admitted")
	}
	if !req("c") {
		t.Fatal("c, the first on the overflow state, was refused")
	}
	if req("d") {
		t.Fatal("d shares the overflow state with c: admitted")
	}
	if req("a") {
		t.Fatal("a's entry was lost to the newcomers")
	}
	now += algos.Minute // every window has passed
	for _, id := range []string{"d", "c", "a"} {
		if !req(id) {
			t.Fatalf("%s refused in a new window", id)
		}
	}
	if req("d") || req("c") {
		t.Fatal("d or c got a second admission: they have entries of their own now")
	}
}

// Garbage in a slot (another layout, a truncated value) is replaced, never read.
func TestGarbageSlot(t *testing.T) {
	d := newData()
	now := t0
	s := newStore(d, &now, 1, 4)
	alg := must(algos.NewFixedWindow(1, algos.Hour))
	key := SlotKey("r", alg, 1, 0)
	for _, v := range [][]byte{{9, 1, 2, 3}, {version}, {version, 1, 2}, make([]byte, 1+entrySize+3)} {
		d.vals[key] = v
		if dec, err := decide(s, "r", fmt.Sprint(v), alg, now); err != nil || !dec.Allowed {
			t.Errorf("slot %v: %+v, %v", v, dec, err)
		}
		if !valid(d.vals[key]) {
			t.Errorf("slot %v not replaced by a valid one: %v", v, d.vals[key])
		}
	}
}

// Every worker loads the same hash key; a bad stored value is replaced.
func TestLoadKey(t *testing.T) {
	d := newData()
	n := byte(0)
	random := func(b []byte) error {
		n++
		for i := range b {
			b[i] = n
		}
		return nil
	}
	k1, err := LoadKey(d, random)
	if err != nil {
		t.Fatal(err)
	}
	k2, err := LoadKey(d, random)
	if err != nil || k2 != k1 || n != 1 {
		t.Fatalf("second worker: %v, %v after %d random draws; want %v after 1", k2, err, n, k1)
	}
	d.vals[KeyName] = []byte("short")
	if k3, err := LoadKey(d, random); err != nil || k3 == k1 || n != 2 {
		t.Errorf("a bad stored key: %v, %v; want a new key", k3, err)
	}
	if _, err := LoadKey(d, func([]byte) error { return errors.New("no entropy") }); err != nil {
		t.Errorf("a stored key needs no random bytes: %v", err)
	}
}

// A commit takes the slot its dry run read instead of reading it again; when another worker
// wrote in between, the CAS refuses the stale read and the commit reads again, without spending
// a retry on it.
func TestDryRunReadKept(t *testing.T) {
	d := newData()
	now := t0
	alg := must(algos.NewFixedWindow(2, algos.Hour))
	s, other := newStore(d, &now, 1, 4), newStore(d, &now, 1, 4)
	s.Retries = 1
	if dec, err := decide(s, "r", "a", alg, now); err != nil || !dec.Allowed { // creates the slot
		t.Fatalf("first request: %+v, %v", dec, err)
	}
	dry := &rules.Op{Key: "r|a", Alg: alg, Req: algos.Request{Now: now, Cost: 1, DryRun: true}}
	s.Decide(context.Background(), []*rules.Op{dry})
	if !dry.Dec.Allowed {
		t.Fatal("dry run refused")
	}
	if dec, err := decide(other, "r", "a", alg, now); err != nil || !dec.Allowed { // takes the last unit meanwhile
		t.Fatalf("the other worker: %+v, %v", dec, err)
	}
	gets := 0
	counting := &countingData{mapData: d, gets: &gets}
	s.Data = counting
	if dec, err := decide(s, "r", "a", alg, now); err != nil || dec.Allowed || gets != 1 {
		t.Errorf("commit after another worker's write: %+v, %v, %d reads; want a denial after 1 read", dec, err, gets)
	}
	// Without a write in between, the commit reads nothing.
	s.Decide(context.Background(), []*rules.Op{{Key: "r|b", Alg: alg, Req: algos.Request{Now: now, Cost: 1, DryRun: true}}})
	gets = 0
	if dec, err := decide(s, "r", "b", alg, now); err != nil || !dec.Allowed || gets != 0 {
		t.Errorf("b's commit: %+v, %v after %d reads; want allowed after none", dec, err, gets)
	}
}

type countingData struct {
	*mapData
	gets *int
}

func (c *countingData) Get(key string) ([]byte, uint32, error) {
	*c.gets++
	return c.mapData.Get(key)
}
