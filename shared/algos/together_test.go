package algos

import (
	"slices"
	"sync"
	"testing"
)

// The golden vectors of Together: each is a request of several limits at a time, the decision of
// each limit and whether it was committed. They are recorded as the tests below run, checked
// against testdata/together.json like the algorithms' (golden_test.go), and store/redisstore
// replays the file through the mixed script's all-or-nothing groups on a real redis-server.
const togetherFile = "testdata/together.json"

type togetherTrace struct {
	Test  string         `json:"test"`
	Parts []Script       `json:"parts"`
	Steps []togetherStep `json:"steps"`
}

type togetherStep struct {
	Now      int64          `json:"now"`
	Denied   bool           `json:"denied,omitempty"`
	Admitted bool           `json:"admitted"`
	Parts    []togetherPart `json:"parts"`
}

// togetherPart is one limit's request in a step and its decision.
type togetherPart struct {
	Cost    int64 `json:"cost"`
	MaxWait int64 `json:"max_wait,omitempty"`
	ID      int64 `json:"id,omitempty"`
	Shadow  bool  `json:"shadow,omitempty"`
	goldenDecision
	Committed bool `json:"committed"`
}

var togetherGolden struct {
	sync.Mutex
	traces []togetherTrace
}

// group is the limits of a golden vector and their states.
type group struct {
	t      *testing.T
	algs   []Algorithm
	states []State
	trace  *togetherTrace
}

func newGroup(t *testing.T, algs ...Algorithm) *group {
	g := &group{t: t, algs: algs, states: make([]State, len(algs)), trace: &togetherTrace{Test: t.Name()}}
	for _, a := range algs {
		g.trace.Parts = append(g.trace.Parts, a.Script())
	}
	t.Cleanup(func() {
		togetherGolden.Lock()
		togetherGolden.traces = append(togetherGolden.traces, *g.trace)
		togetherGolden.Unlock()
	})
	return g
}

// ask is one limit's request in a step.
type ask struct {
	cost, maxWait, id int64
	shadow            bool
}

// decide makes a request of the group's limits at now, each with its ask, records it, and returns
// the parts as Together left them and whether it admitted the request.
func (g *group) decide(now int64, denied bool, asks ...ask) ([]Part, bool) {
	g.t.Helper()
	if len(asks) != len(g.algs) {
		g.t.Fatalf("%d asks for %d limits", len(asks), len(g.algs))
	}
	parts := make([]Part, len(g.algs))
	for i, a := range asks {
		parts[i] = Part{Alg: g.algs[i], State: &g.states[i], Req: Request{Now: now, Cost: a.cost, MaxWait: a.maxWait, ID: a.id}, Shadow: a.shadow}
	}
	admitted := Together(parts, denied)
	st := togetherStep{Now: now, Denied: denied, Admitted: admitted}
	for _, p := range parts {
		st.Parts = append(st.Parts, togetherPart{p.Req.Cost, p.Req.MaxWait, p.Req.ID, p.Shadow, goldenOf(p.Dec), p.Committed})
	}
	g.trace.Steps = append(g.trace.Steps, st)
	return parts, admitted
}

// want checks a step's verdict and each part's allowed, remaining and committed.
func want(t *testing.T, step string, parts []Part, admitted, wantAdmitted bool, allowed []bool, remaining []int64, committed []bool) {
	t.Helper()
	if admitted != wantAdmitted {
		t.Errorf("%s: admitted %v, want %v", step, admitted, wantAdmitted)
	}
	for i, p := range parts {
		if p.Dec.Allowed != allowed[i] || p.Dec.Remaining != remaining[i] || p.Committed != committed[i] {
			t.Errorf("%s, part %d: allowed %v remaining %d committed %v, want %v %d %v (%+v)",
				step, i, p.Dec.Allowed, p.Dec.Remaining, p.Committed, allowed[i], remaining[i], committed[i], p.Dec)
		}
	}
}

func mustAlg[T Algorithm](a T, err error) Algorithm {
	if err != nil {
		panic(err)
	}
	return a
}

// TestTogether: a request of three limits (per client a token bucket, per path a sliding
// window, global a fixed window) takes from all of them or from none.
func TestTogether(t *testing.T) {
	ms := Millisecond
	g := newGroup(t,
		mustAlg(NewGCRA(2, Second, 2)),
		mustAlg(NewSlidingWindow(3, Second)),
		mustAlg(NewFixedWindow(4, Second)))
	one := []ask{{cost: 1}, {cost: 1}, {cost: 1}}
	all, none := []bool{true, true, true}, []bool{false, false, false}
	p, ok := g.decide(0, false, one...)
	want(t, "first", p, ok, true, all, []int64{1, 2, 3}, all)
	p, ok = g.decide(0, false, one...)
	want(t, "second", p, ok, true, all, []int64{0, 1, 2}, all)
	// The bucket is empty: the others are asked, as dry runs, and keep their units.
	p, ok = g.decide(100*ms, false, one...)
	want(t, "bucket empty", p, ok, false, []bool{false, true, true}, []int64{0, 0, 1}, none)
	if p[0].Dec.RetryAfter != 400*ms {
		t.Errorf("bucket empty: retry after %d µs, want 400 ms", p[0].Dec.RetryAfter)
	}
	p, ok = g.decide(500*ms, false, one...)
	want(t, "refilled", p, ok, true, all, []int64{0, 0, 1}, all)
	// The path's window is full now: the bucket, which has a unit again, keeps it.
	p, ok = g.decide(Second, false, one...)
	want(t, "window full", p, ok, false, []bool{true, false, true}, []int64{0, 0, 3}, none)
	// Another limit, decided elsewhere, refused the request: nothing is taken.
	p, ok = g.decide(2*Second, false, ask{cost: 0}, ask{cost: 0}, ask{cost: 0})
	want(t, "peek", p, ok, true, all, []int64{2, 3, 4}, all)
	p, ok = g.decide(2*Second, true, one...)
	want(t, "denied elsewhere", p, ok, false, all, []int64{1, 2, 3}, none)
	// A cost above a limit's capacity: never, and nothing taken from the others.
	p, ok = g.decide(2*Second, false, ask{cost: 3}, ask{cost: 1}, ask{cost: 1})
	want(t, "too large", p, ok, false, []bool{false, true, true}, []int64{2, 2, 3}, none)
	if p[0].Dec.RetryAfter != Never {
		t.Errorf("too large: retry after %d, want Never", p[0].Dec.RetryAfter)
	}
	p, ok = g.decide(2*Second, false, ask{cost: 2}, ask{cost: 3}, ask{cost: 4})
	want(t, "all of every limit", p, ok, true, all, []int64{0, 0, 0}, all)
}

// TestTogetherBan: a denial that bans starts its ban even though the request takes nothing from
// the others; a ban that holds denies, and a denial during it starts nothing new.
func TestTogetherBan(t *testing.T) {
	g := newGroup(t,
		mustAlg(NewBan(mustAlg(NewFixedWindow(1, Second)), 10*Second)),
		mustAlg(NewGCRA(10, Second, 10)))
	one := []ask{{cost: 1}, {cost: 1}}
	p, ok := g.decide(0, false, one...)
	want(t, "first", p, ok, true, []bool{true, true}, []int64{0, 9}, []bool{true, true})
	p, ok = g.decide(0, false, one...)
	want(t, "banned", p, ok, false, []bool{false, true}, []int64{0, 8}, []bool{true, false})
	if p[0].Dec.RetryAfter != 10*Second || g.states[0].Ban != 10*Second {
		t.Errorf("banned: retry after %d, ban until %d; want 10 s and 10 s", p[0].Dec.RetryAfter, g.states[0].Ban)
	}
	p, ok = g.decide(5*Second, false, one...)
	want(t, "during the ban", p, ok, false, []bool{false, true}, []int64{0, 9}, []bool{true, false})
	if p[0].Dec.RetryAfter != 5*Second || g.states[0].Ban != 10*Second {
		t.Errorf("during the ban: retry after %d, ban until %d; want 5 s and 10 s", p[0].Dec.RetryAfter, g.states[0].Ban)
	}
	// Refused elsewhere: a ban's own denial still starts it.
	p, ok = g.decide(10*Second, true, ask{cost: 2}, ask{cost: 1})
	want(t, "elsewhere", p, ok, false, []bool{false, true}, []int64{0, 9}, []bool{true, false})
	if g.states[0].Ban != 20*Second {
		t.Errorf("elsewhere: ban until %d, want 20 s", g.states[0].Ban)
	}
}

// TestTogetherShadow: a shadow limit's denial refuses nothing; it is committed with the others
// (its ban starts) when the request is admitted, and nothing of it when another limit refuses.
func TestTogetherShadow(t *testing.T) {
	g := newGroup(t,
		mustAlg(NewBan(mustAlg(NewFixedWindow(1, Second)), 10*Second)),
		mustAlg(NewFixedWindow(2, Second)))
	sh := ask{cost: 1, shadow: true}
	p, ok := g.decide(0, false, sh, ask{cost: 1})
	want(t, "first", p, ok, true, []bool{true, true}, []int64{0, 1}, []bool{true, true})
	p, ok = g.decide(0, false, sh, ask{cost: 1})
	want(t, "shadow denies", p, ok, true, []bool{false, true}, []int64{0, 0}, []bool{true, true})
	if g.states[0].Ban != 10*Second {
		t.Errorf("shadow denies: its ban until %d, want 10 s", g.states[0].Ban)
	}
	g2 := newGroup(t,
		mustAlg(NewBan(mustAlg(NewFixedWindow(1, Second)), 10*Second)),
		mustAlg(NewFixedWindow(1, Second)))
	p, ok = g2.decide(0, false, sh, ask{cost: 1})
	want(t, "both admit", p, ok, true, []bool{true, true}, []int64{0, 0}, []bool{true, true})
	p, ok = g2.decide(0, false, sh, ask{cost: 1})
	want(t, "both deny", p, ok, false, []bool{false, false}, []int64{0, 0}, []bool{false, false})
	if g2.states[0].Ban != 0 {
		t.Errorf("a refused request started the shadow limit's ban (until %d)", g2.states[0].Ban)
	}
}

// TestTogetherLogs: the sorted-set algorithms (sliding log, concurrency with its lease) and a
// delay, all or nothing.
func TestTogetherLogs(t *testing.T) {
	ms := Millisecond
	g := newGroup(t,
		mustAlg(NewSlidingLog(2, Second)),
		mustAlg(NewConcurrency(2, 10*Second)),
		mustAlg(NewLeakyBucket(10, Second, 2, 0)))
	p, ok := g.decide(0, false, ask{cost: 1}, ask{cost: 1, id: 1}, ask{cost: 1, maxWait: Second})
	want(t, "first", p, ok, true, []bool{true, true, true}, []int64{1, 1, 2}, []bool{true, true, true})
	p, ok = g.decide(0, false, ask{cost: 1}, ask{cost: 1, id: 2}, ask{cost: 1, maxWait: Second})
	want(t, "second", p, ok, true, []bool{true, true, true}, []int64{0, 0, 1}, []bool{true, true, true})
	if p[2].Dec.Delay != 100*ms {
		t.Errorf("second: the leaky bucket delays %d µs, want 100 ms", p[2].Dec.Delay)
	}
	p, ok = g.decide(0, false, ask{cost: 1}, ask{cost: 1, id: 3}, ask{cost: 1, maxWait: Second})
	want(t, "log full", p, ok, false, []bool{false, false, true}, []int64{0, 0, 0}, []bool{false, false, false})
	if len(g.states[0].Log) != 2 || len(g.states[1].Log) != 2*3 { // a lease is 3 words: expiry, id, units
		t.Errorf("log full: the logs hold %v and %v, want 2 entries and 2 leases", g.states[0].Log, g.states[1].Log)
	}
	p, ok = g.decide(Second, false, ask{cost: 1}, ask{cost: 0}, ask{cost: 1, maxWait: Second})
	want(t, "a second later", p, ok, true, []bool{true, true, true}, []int64{1, 0, 2}, []bool{true, true, true})
}

// checkTogether writes the recorded vectors (-update) or checks them against the file, as
// checkGolden does the algorithms'.
func checkTogether() error {
	return checkVectors(togetherFile, slices.Clone(togetherGolden.traces), func(t *togetherTrace) *string { return &t.Test })
}
