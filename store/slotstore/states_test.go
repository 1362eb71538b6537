package slotstore

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/rules"
)

// adaptive is an adaptive limit with an slo (no probes): it starts at min_limit 2 and moves
// every interval of 100 ms with 10 samples.
func adaptive(t testing.TB) *algos.Adaptive {
	t.Helper()
	a, err := algos.NewAdaptive(algos.AdaptiveConfig{Percentile: 50, SLO: 50 * algos.Millisecond, MinLimit: 2, MaxLimit: 100,
		Interval: 100 * algos.Millisecond, Smoothing: 100, ProbeEvery: algos.Minute, ProbeSamples: 10, Backoff: 50})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func newStates(d Data, now *int64) *States {
	return &States{Data: d, Now: func() int64 { return *now }, Retries: 4}
}

// run decides one op of alg for key and returns it.
func run(s *States, alg algos.Algorithm, key string, req algos.Request) *rules.Op {
	op := &rules.Op{Key: key, Alg: alg, Req: req}
	s.Decide(context.Background(), []*rules.Op{op})
	return op
}

// take takes one slot; release gives one back after latency µs (dropped: a 5xx).
func take(s *States, alg algos.Algorithm, key string) *rules.Op {
	return run(s, alg, key, algos.Request{Cost: 1})
}

func release(s *States, alg algos.Algorithm, key string, latency int64, dropped bool) *rules.Op {
	return run(s, alg, key, algos.Request{Cost: 1, Release: true, Latency: latency, Dropped: dropped})
}

// A state written by one worker is the state another reads: slots taken on one are in flight on
// the other, and a limit learned on both is one limit.
func TestStatesRoundTrip(t *testing.T) {
	d, now := newData(), t0
	a, b := newStates(d, &now), newStates(d, &now)
	alg := adaptive(t)
	for i, s := range []*States{a, b} {
		if op := take(s, alg, "r"); !op.Dec.Allowed || op.Err != nil || op.Dec.Remaining != int64(1-i) {
			t.Fatalf("take %d: %+v, %v; want allowed, remaining %d", i, op.Dec, op.Err, 1-i)
		}
	}
	if op := take(a, alg, "r"); op.Dec.Allowed {
		t.Fatalf("third take at limit 2: %+v, want denied", op.Dec)
	}
	release(b, alg, "r", algos.Millisecond, false)
	if op := take(a, alg, "r"); !op.Dec.Allowed {
		t.Fatalf("take after a release on the other worker: %+v, want allowed", op.Dec)
	}
	release(a, alg, "r", 0, false)
	release(b, alg, "r", 0, false)
	// Fast answers with both slots busy: every interval doubles the limit (smoothing 100).
	limit := int64(2)
	for round := 0; round < 4; round++ {
		for batch := 0; batch < 5; batch++ {
			for i := int64(0); i < limit; i++ {
				if op := take([]*States{a, b}[i%2], alg, "r"); !op.Dec.Allowed {
					t.Fatalf("round %d: take %d under limit %d denied: %+v", round, i, limit, op.Dec)
				}
			}
			for i := int64(0); i < limit; i++ {
				release([]*States{a, b}[i%2], alg, "r", 5*algos.Millisecond, false)
			}
		}
		now += 100 * algos.Millisecond
		op := take(a, alg, "r") // closes the interval
		if op.Dec.Limit != 2*limit {
			t.Fatalf("round %d: limit %d, want %d", round, op.Dec.Limit, 2*limit)
		}
		limit = op.Dec.Limit
		release(a, alg, "r", 0, false)
	}
	if op := take(b, alg, "r"); op.Dec.Limit != limit {
		t.Fatalf("the other worker reads limit %d, want %d", op.Dec.Limit, limit)
	}
	// A dropped request cuts it by backoff (50%) at once, on both.
	release(b, alg, "r", 0, true)
	if op := take(a, alg, "r"); op.Dec.Limit != limit/2 {
		t.Fatalf("after a drop: limit %d, want %d", op.Dec.Limit, limit/2)
	}
	val, _, err := d.Get(StateKey(alg, "r"))
	if err != nil || !validState(val) || stateExpiry(val) != now+algos.Minute {
		t.Fatalf("stored value %x, %v: want a valid state expiring at now + probe_every", val, err)
	}
}

// A state idle for its TTL (adaptive: probe_every) is fresh again: a lost release is forgotten.
func TestStatesExpire(t *testing.T) {
	d, now := newData(), t0
	s, alg := newStates(d, &now), adaptive(t)
	take(s, alg, "r")
	take(s, alg, "r")
	if op := take(s, alg, "r"); op.Dec.Allowed {
		t.Fatalf("at limit: %+v, want denied", op.Dec)
	}
	now += algos.Minute
	if op := take(s, alg, "r"); !op.Dec.Allowed || op.Dec.Remaining != 1 {
		t.Fatalf("after the TTL: %+v, want a fresh state", op.Dec)
	}
}

// A dry run reads and writes nothing; a denial leaves the value as it was and writes nothing.
func TestStatesWritesOnlyChanges(t *testing.T) {
	d, now := newData(), t0
	s, alg := newStates(d, &now), adaptive(t)
	take(s, alg, "r")
	sets := d.sets
	if op := run(s, alg, "r", algos.Request{Cost: 1, DryRun: true}); !op.Dec.Allowed || op.Dec.Remaining != 0 {
		t.Fatalf("dry run: %+v, want allowed with remaining 0", op.Dec)
	}
	if d.sets != sets {
		t.Fatalf("a dry run wrote %d times", d.sets-sets)
	}
	take(s, alg, "r")
	sets = d.sets
	for i := 0; i < 3; i++ {
		if op := take(s, alg, "r"); op.Dec.Allowed {
			t.Fatalf("take %d at limit: %+v, want denied", i, op.Dec)
		}
	}
	if d.sets != sets {
		t.Fatalf("denials wrote %d times", d.sets-sets)
	}
}

// Another worker's write between our read and our write costs a retry, not its admission; when
// every write loses, the op is denied with ErrContended and Contended counts it.
func TestStatesContention(t *testing.T) {
	d, now := newData(), t0
	s, other, alg := newStates(d, &now), newStates(d, &now), adaptive(t)
	release(s, alg, "r", 0, false) // the key exists, nothing in flight
	raced := false
	d.before = func(string) error {
		if !raced {
			raced = true
			d.before = nil
			take(other, alg, "r")
		}
		return nil
	}
	if op := take(s, alg, "r"); !op.Dec.Allowed || op.Err != nil {
		t.Fatalf("take that lost one race: %+v, %v; want allowed", op.Dec, op.Err)
	}
	if !raced {
		t.Fatal("no race ran")
	}
	if op := take(s, alg, "r"); op.Dec.Allowed {
		t.Fatalf("a third take under limit 2 was admitted: %+v", op.Dec)
	}

	contended := 0
	s.Contended = func() { contended++ }
	release(other, alg, "r", 0, false)
	d.before = func(string) error { return ErrCasMismatch }
	sets := d.sets
	op := take(s, alg, "r")
	if op.Dec.Allowed || !errors.Is(op.Err, ErrContended) || contended != 1 {
		t.Fatalf("every write lost: %+v, %v, contended %d; want denied, ErrContended, 1", op.Dec, op.Err, contended)
	}
	if d.sets-sets != s.Retries {
		t.Fatalf("%d writes, want Retries = %d", d.sets-sets, s.Retries)
	}

	// A release is retried ReleaseRetries times: a lost one would keep its slot.
	d.before = nil
	if op := take(other, alg, "r"); !op.Dec.Allowed {
		t.Fatalf("take beside one in flight: %+v", op.Dec)
	}
	lost := ReleaseRetries - 1
	d.before = func(string) error {
		if lost == 0 {
			return nil
		}
		lost--
		return ErrCasMismatch
	}
	if op := release(s, alg, "r", 0, false); op.Err != nil {
		t.Fatalf("release that lost %d races: %v", ReleaseRetries-1, op.Err)
	}
	d.before = nil
	if op := take(s, alg, "r"); !op.Dec.Allowed || op.Dec.Remaining != 0 {
		t.Fatalf("take after the release: %+v, want allowed, the second in flight", op.Dec)
	}
}

// A value that is not a state of this layout is a fresh state, replaced by the next write;
// reading it never panics.
func TestStatesCorruptValue(t *testing.T) {
	alg := adaptive(t)
	good := func() []byte {
		d, now := newData(), t0
		take(newStates(d, &now), alg, "r")
		v, _, _ := d.Get(StateKey(alg, "r"))
		return v
	}()
	wrongVersion := append([]byte{statesVersion + 1}, good[1:]...)
	huge := append([]byte{}, restState...)
	huge = append(huge, make([]byte, 8*(maxLogWords+1))...)
	huge[0] = statesVersion
	for _, tt := range []struct {
		name string
		val  []byte
	}{
		{"empty", []byte{}},
		{"short", good[:stateHeader-1]},
		{"version", wrongVersion},
		{"length", append(append([]byte{}, good...), 1, 2, 3)},
		{"truncated log", good[:len(good)-8]},
		{"too long", huge},
		{"foreign", []byte("hello, shared data")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d, now := newData(), t0
			s := newStates(d, &now)
			if err := d.Set(StateKey(alg, "r"), tt.val, 0); err != nil {
				t.Fatal(err)
			}
			if op := take(s, alg, "r"); !op.Dec.Allowed || op.Err != nil || op.Dec.Remaining != 1 || op.Dec.Limit != 2 {
				t.Fatalf("take on %x: %+v, %v; want a fresh state's admission", tt.val, op.Dec, op.Err)
			}
			if v, _, _ := d.Get(StateKey(alg, "r")); !validState(v) {
				t.Fatalf("value after the write: %x, want a valid state", v)
			}
		})
	}
}

// Keys are bounded by the rule's configured dimension values: requests that lack the value
// (rules' client-address fallback) share one key, however many clients send them.
func TestStatesBoundedKeys(t *testing.T) {
	d, now := newData(), t0
	s, alg := newStates(d, &now), adaptive(t)
	for i := 0; i < 1000; i++ {
		ip := "10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256)
		for _, key := range []string{"r|%ip:" + ip, "r|users", "r|orders", "g"} {
			op := take(s, alg, key)
			release(s, alg, key, 0, false)
			if op.Err != nil {
				t.Fatalf("%s: %v", key, op.Err)
			}
		}
	}
	var keys []string
	for k := range d.vals {
		if strings.HasPrefix(k, "diana/a/") {
			keys = append(keys, k)
		}
	}
	want := map[string]bool{StateKey(alg, "r|%none"): true, StateKey(alg, "r|users"): true, StateKey(alg, "r|orders"): true, StateKey(alg, "g"): true}
	if len(keys) != len(want) {
		t.Fatalf("keys %q, want the %d of %v", keys, len(want), want)
	}
	for _, k := range keys {
		if !want[k] {
			t.Errorf("unexpected key %q", k)
		}
	}
	if len(s.keys) != len(want) {
		t.Errorf("the key cache holds %d entries, want %d", len(s.keys), len(want))
	}
}

// A failing Data lets the request through that rule, with the error.
func TestStatesDataError(t *testing.T) {
	d, now := newData(), t0
	s, alg := newStates(d, &now), adaptive(t)
	take(s, alg, "r")
	boom := errors.New("boom")
	d.before = func(string) error { return boom }
	if op := take(s, alg, "r"); !op.Dec.Allowed || !errors.Is(op.Err, boom) {
		t.Fatalf("failing write: %+v, %v; want allowed with the error", op.Dec, op.Err)
	}
}

// FuzzStatesValue: whatever a state's key holds (a value of this layout is taken as a state as
// it is: only the filter writes these keys), deciding on it never panics and leaves a valid
// state.
func FuzzStatesValue(f *testing.F) {
	alg := adaptive(f)
	d, now := newData(), t0
	take(newStates(d, &now), alg, "r")
	good, _, _ := d.Get(StateKey(alg, "r"))
	f.Add(good)
	f.Add([]byte{})
	f.Add(restState)
	f.Add(append([]byte{statesVersion}, make([]byte, stateHeader+8*114)...))
	f.Fuzz(func(t *testing.T, val []byte) {
		d, now := newData(), t0
		s := newStates(d, &now)
		if err := d.Set(StateKey(alg, "r"), val, 0); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 3; i++ {
			if op := take(s, alg, "r"); op.Err != nil {
				t.Fatalf("take %d: %v", i, op.Err)
			}
		}
		release(s, alg, "r", algos.Millisecond, true)
		if v, _, _ := d.Get(StateKey(alg, "r")); !validState(v) {
			t.Fatalf("value after the writes: %x, want a valid state", v)
		}
	})
}

// As in Store, a commit takes the value its dry run read; a stale one costs a read, not a retry.
func TestStatesDryRunReadKept(t *testing.T) {
	d, now := newData(), t0
	gets := 0
	s, other, alg := newStates(&countingData{mapData: d, gets: &gets}, &now), newStates(d, &now), adaptive(t)
	s.Retries = 1
	release(s, alg, "r", 0, false) // the key exists, nothing in flight
	run(s, alg, "r", algos.Request{Cost: 1, DryRun: true})
	gets = 0
	if op := take(s, alg, "r"); !op.Dec.Allowed || op.Err != nil || gets != 0 {
		t.Fatalf("commit after its dry run: %+v, %v after %d reads; want allowed after none", op.Dec, op.Err, gets)
	}
	run(s, alg, "r", algos.Request{Cost: 1, DryRun: true})
	take(other, alg, "r") // the last slot, meanwhile
	gets = 0
	if op := take(s, alg, "r"); op.Dec.Allowed || op.Err != nil || gets != 1 {
		t.Fatalf("commit after another worker's write: %+v, %v, %d reads; want a denial after 1 read", op.Dec, op.Err, gets)
	}
}
