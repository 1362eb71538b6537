package algos

// MaxSubWindows is the most sub-windows a SlidingWindowSub accepts: its state holds a count per
// sub-window (N + 2 words: 496 bytes at this cap).
const MaxSubWindows = 60

// SlidingWindowSub admits at most Limit units per sliding window of Window µs, estimated from N
// sub-windows of Window/N µs each (aligned on the clock, not necessarily a whole number of µs):
// the sliding window (now − Window, now] covers the current sub-window up to now, the N − 1
// before it in full, and a part of the oldest one, which is weighted by that part as
// SlidingWindow weights its previous window. With sub-window k = ⌊now·N/Window⌋ and
// e = now·N mod Window (its elapsed part, in Window/N-ths of a µs), a request of cost n is
// decided, exactly in integers, as
//
//	used = c[k] + c[k−1] + … + c[k−N+1] + ⌈c[k−N]·(Window − e)/Window⌉
//	used + n > Limit → deny; RetryAfter as below, Never if n > Limit; state unchanged
//	otherwise        → admit; c[k] += n
//	Remaining = max(0, Limit − used)
//	ResetAfter = TTL = until the estimate is 0: the end of sub-window j + N for the newest j
//	             with c[j] > 0, else 0
//
// With N = 1 it decides as SlidingWindow (rules build a SlidingWindow then). A clock that goes
// back into an earlier sub-window counts in the stored one with e = 0, where the oldest weighs
// the most, so it adds no capacity. MaxWait is ignored; cost 0 peeks; a partial request takes
// min(n, Remaining). RetryAfter is exact: the first µs at which the request fits if nothing else
// is admitted meanwhile.
//
// What it guarantees, for requests in time order (proved in the test, checked against an exact
// log): a half-open interval of D ≤ Window µs holds at most
//
//	Limit                                            if N·D ≤ (N − 1)·Window
//	Limit + ⌊Limit·(N·D − (N − 1)·Window − 1)/Window⌋  otherwise
//
// units. So any (N − 1)/N of a window holds at most Limit, and a whole window at most 2·Limit − 1
// (for Limit < Window): the bound is reached when Limit units arrive in the last µs of a
// sub-window and the next burst comes just under a window later, when that sub-window, the
// oldest, weighs almost nothing though its units are all still inside. The proof: take the last
// unit admitted in the interval, at t; every unit of the interval lies in (t − D, t], so in the
// sub-windows the estimate at t counts in full, except those of the oldest, c of them, counted
// as ⌈c·(Window − e)/Window⌉ ≥ c − ⌊c·e/Window⌋; they are inside only if
// e < N·D − (N − 1)·Window, and c ≤ Limit. SlidingWindow is the case N = 1: Limit + ⌊Limit·(D −
// 1)/Window⌋ in D, so 100 per second passes 100 units in the last µs of one window and 60 more
// 603 ms later, 160 in 603 ms; more sub-windows confine the error to the oldest one, 1/N of the
// window. The estimate also denies early: when the oldest sub-window's units came at its start,
// they are counted after they left the window.
//
// Bounds: 1 ≤ Limit ≤ MaxCount, 1 µs ≤ Window ≤ MaxSpan, 1 ≤ N ≤ min(MaxSubWindows, Window):
// a sub-window lasts at least 1 µs, which keeps k ≤ now. Counts add up to at most 2·Limit, and
// products of a count or an index and a time are divided at once (mulDiv).
//
// State: N + 2 words, word 0 = the first µs of sub-window k, word 1 + i = c[k − i] for i = 0..N;
// the first four in W, the others in Log (Script.Words of them; in Redis one string). With N = 1
// it is SlidingWindow's state, and a state written under another N (a rule whose subwindows
// changed) is read as counts of the sub-windows its times fall in: wrong for at most a window,
// never a time taken for an index.
type SlidingWindowSub struct {
	limit, window, n int64
	script           Script
}

// NewSlidingWindowSub returns a limit of limit units per sliding window of window µs, counted in
// subwindows sub-windows.
func NewSlidingWindowSub(limit, window, subwindows int64) (*SlidingWindowSub, error) {
	const name = "sliding_window" // its Lua twin is sliding_window.lua's, with a third argument
	if err := count(name, "limit", limit); err != nil {
		return nil, err
	}
	if err := duration(name, "window", window); err != nil {
		return nil, err
	}
	if err := positive(name, "subwindows", subwindows); err != nil {
		return nil, err
	}
	if err := atMost(name, "subwindows", subwindows, MaxSubWindows); err != nil {
		return nil, err
	}
	if subwindows > window {
		return nil, paramError(name, "subwindows", "must be at most the window in µs ("+itoa(window)+"): a sub-window lasts at least 1 µs, got "+itoa(subwindows))
	}
	s := &SlidingWindowSub{limit: limit, window: window, n: subwindows}
	words := int(subwindows) + 2 - len(State{}.W)
	s.script = Script{Name: name, Args: []int64{limit, window, subwindows}, Limit: limit, Words: max(0, words)}
	return s, nil
}

// Script implements Algorithm.
func (s *SlidingWindowSub) Script() Script { return s.script }

// SlidingWindow implements Sliding.
func (s *SlidingWindowSub) SlidingWindow() int64 { return s.window }

// subState is a state: the current sub-window's index and the counts, newest first.
type subState struct {
	k int64
	c [MaxSubWindows + 1]int64
}

// Decide implements Algorithm.
func (s *SlidingWindowSub) Decide(st *State, r Request) Decision {
	now, n, w, ns := r.Now, r.Cost, s.window, int(s.n)
	k, e := s.at(now)
	var ss subState
	s.load(st, &ss)
	empty := true
	for _, c := range ss.c[:ns+1] {
		empty = empty && c == 0
	}
	switch {
	case empty:
		ss.k = k
	case k > ss.k:
		d := int(min(k-ss.k, s.n+1))
		for i := ns; i >= 0; i-- {
			if i >= d {
				ss.c[i] = ss.c[i-d]
			} else {
				ss.c[i] = 0
			}
		}
		ss.k = k
	case k < ss.k:
		e = 0 // a clock gone back counts in the stored sub-window, where the oldest weighs the most
	}
	used := mulDivCeil(ss.c[ns], w-e, w)
	for _, c := range ss.c[:ns] {
		used += c
	}
	d := Decision{Limit: s.limit, Remaining: max(0, s.limit-used)}
	d.ResetAfter = s.resetAfter(now, &ss)
	d.TTL = d.ResetAfter
	if r.Partial && n > d.Remaining {
		n = d.Remaining
		if n == 0 {
			d.RetryAfter = s.retryAfter(now, &ss, 1)
			return d
		}
	}
	if n > s.limit {
		d.RetryAfter = Never
		return d
	}
	if used+n > s.limit {
		d.RetryAfter = s.retryAfter(now, &ss, n)
		return d
	}
	ss.c[0] += n
	d.Allowed = true
	d.Granted = n
	d.Remaining = s.limit - used - n
	d.ResetAfter = s.resetAfter(now, &ss)
	d.TTL = d.ResetAfter
	if n > 0 && !r.DryRun {
		s.store(st, &ss)
	}
	return d
}

// at returns the index of the sub-window now falls in, ⌊now·N/Window⌋, and its elapsed part,
// now·N mod Window, without forming now·N.
func (s *SlidingWindowSub) at(now int64) (k, e int64) {
	a := floorDiv(now, s.window)
	q, e := mulDiv(now-a*s.window, s.n, s.window)
	return a*s.n + q, e
}

// start returns the first µs whose elapsed part in sub-window m is at least x (0 ≤ x ≤ Window):
// ⌈(m·Window + x)/N⌉.
func (s *SlidingWindowSub) start(m, x int64) int64 {
	a := floorDiv(m, s.n)
	q, r := mulDiv(m-a*s.n, s.window, s.n)
	return a*s.window + q + (r+x+s.n-1)/s.n
}

// resetAfter is the time until the estimate falls to 0: the newest count leaves the window.
func (s *SlidingWindowSub) resetAfter(now int64, ss *subState) int64 {
	for i := int64(0); i <= s.n; i++ {
		if ss.c[i] > 0 {
			return s.start(ss.k-i+s.n+1, 0) - now
		}
	}
	return 0
}

// retryAfter is the smallest wait after which n units fit, for a request denied now (n ≤ Limit):
// in sub-window k + j the counts c[k−N+1+j..k] are counted in full and c[k−N+j] is the oldest,
// whose weight decays to 0 over the sub-window.
func (s *SlidingWindowSub) retryAfter(now int64, ss *subState, n int64) int64 {
	w, ns := s.window, int(s.n)
	full := int64(0)
	for _, c := range ss.c[:ns] {
		full += c
	}
	for j := 0; j <= ns; j++ {
		if k := s.limit - n - full; k >= 0 {
			// Fits from elapsed x on, where ⌈old·(w − x)/w⌉ ≤ k, that is w − x ≤ ⌊k·w/old⌋.
			x := int64(0)
			if old := ss.c[ns-j]; old > k {
				q, _ := mulDiv(k, w, old)
				x = w - q
			}
			if x < w {
				return s.start(ss.k+int64(j), x) - now
			}
		}
		if j < ns {
			full -= ss.c[ns-1-j]
		}
	}
	return s.start(ss.k+s.n+1, 0) - now // every count has left the window
}

// load reads st's words into ss; missing words are 0.
func (s *SlidingWindowSub) load(st *State, ss *subState) {
	ss.k, _ = s.at(st.W[0])
	for i := 0; i <= int(s.n); i++ {
		if j := i + 1; j < len(st.W) {
			ss.c[i] = st.W[j]
		} else if j -= len(st.W); j < len(st.Log) {
			ss.c[i] = st.Log[j]
		}
	}
}

// store writes ss into st, reusing st.Log's array.
func (s *SlidingWindowSub) store(st *State, ss *subState) {
	st.W[0] = s.start(ss.k, 0)
	if extra := s.script.Words; cap(st.Log) >= extra {
		st.Log = st.Log[:extra]
	} else {
		st.Log = make([]int64, extra)
	}
	for i := 0; i <= int(s.n); i++ {
		if j := i + 1; j < len(st.W) {
			st.W[j] = ss.c[i]
		} else {
			st.Log[j-len(st.W)] = ss.c[i]
		}
	}
}

// Batching implements Batcher as SlidingWindow does, per sub-window: a grant's units are spent
// within the sub-window they count in (which ends one window before the grant's ResetAfter), so
// every sub-window's count covers what is spent in it. Sub-windows must then be a whole number
// of µs. MaxAge defaults to a tenth of a sub-window, at most one second.
func (s *SlidingWindowSub) Batching(maxAge int64) (*Batching, error) {
	if s.window%s.n != 0 {
		return nil, paramError("sliding_window", "subwindows", "must divide the window in µs ("+itoa(s.window)+") in batched mode, whose units are spent within the sub-window they count in; got "+itoa(s.n))
	}
	sub := s.window / s.n
	age, err := batchAge("sliding_window", maxAge, min(second, sub/10))
	if err != nil {
		return nil, err
	}
	return &Batching{Alg: s, MaxAge: age, window: sub, tail: s.window}, nil
}
