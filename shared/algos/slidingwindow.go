package algos

// SlidingWindow admits at most Limit units per sliding window of Window µs, estimated as
// Cloudflare does from two fixed windows: the count of the current aligned window and the count
// of the previous one, weighted by the part of it the sliding window still covers,
//
//	estimate = prev·(Window − elapsed)/Window + cur,   elapsed = now − start of the current window
//
// so a request of cost n at time now is decided, exactly in integers, with prev's weight rounded up
// (a request fits iff prev·(Window − elapsed)/Window ≤ Limit − cur − n, and the right side is a
// whole number):
//
//	used = cur + ⌈prev·(Window − elapsed)/Window⌉      // the estimate, rounded up
//	used + n > Limit → deny; RetryAfter as below, Never if n > Limit; state unchanged
//	otherwise        → admit; store cur + n
//	Remaining = max(0, Limit − used)
//	ResetAfter = until the estimate is 0: the end of the next window if cur > 0, else the end of
//	             the current one if prev > 0, else 0
//
// When now is one window past the stored one, cur becomes prev; two or more, both are 0. The
// estimate assumes the previous window's requests were spread evenly, so the burst at a boundary
// is smaller than a fixed window's but not gone: an interval of D ≤ Window µs holds at most
// Limit + ⌊Limit·(D − 1)/Window⌋ units (SlidingWindowSub with N = 1 proves it), reached when
// Limit units come in the last µs of a window: 100 per second then admits 60 more 603 ms later,
// and 99 more just under a second later, 2·Limit − 1 in one window. SlidingWindowSub confines
// the error to a sub-window. With integer counts a full previous window weighs more than 0 until
// the boundary, so saturated single-unit traffic gets Limit − 1 units per window, and a client at
// exactly the limit rate sees about one request per window denied.
//
// RetryAfter is exact: the smallest wait after which the request fits if nothing else is
// admitted meanwhile. With k = Limit − cur − n, the weighted prev decays linearly, so the request
// fits in the current window once prev·(end − t) ≤ k·Window, at t = end − ⌊k·Window/prev⌋ (end =
// start + Window); if k < 0 it has to wait for cur to become the previous window's count, at
// t = end + Window − ⌊(Limit − n)·Window/cur⌋. Both quotients are below Window.
//
// A clock that goes back into an earlier window counts in the stored window with elapsed = 0,
// where prev weighs the most, so it never adds capacity (even a peek may then be denied). The
// algorithm does not delay requests: MaxWait is ignored. Cost 0 peeks. A partial request takes
// min(n, Remaining) units. TTL = ResetAfter: after it, an empty state decides the same.
//
// Bounds: 1 ≤ Limit ≤ MaxCount, 1 µs ≤ Window ≤ MaxSpan, any combination: the products of a
// count and a time are divided at once (mulDiv), never kept.
//
// State: W[0] = start of the current window (µs), W[1] = cur, W[2] = prev.
type SlidingWindow struct {
	limit, window int64
	script        Script
}

// NewSlidingWindow returns a limit of limit units per sliding window of window µs.
func NewSlidingWindow(limit, window int64) (*SlidingWindow, error) {
	const name = "sliding_window"
	if err := count(name, "limit", limit); err != nil {
		return nil, err
	}
	if err := duration(name, "window", window); err != nil {
		return nil, err
	}
	s := &SlidingWindow{limit: limit, window: window}
	s.script = Script{Name: name, Args: []int64{limit, window}, Limit: limit}
	return s, nil
}

// Script implements Algorithm.
func (s *SlidingWindow) Script() Script { return s.script }

// SlidingWindow implements Sliding.
func (s *SlidingWindow) SlidingWindow() int64 { return s.window }

// Decide implements Algorithm.
func (s *SlidingWindow) Decide(st *State, r Request) Decision {
	now, n, w := r.Now, r.Cost, s.window
	cs, cur, prev := st.W[0], st.W[1], st.W[2]
	if start := floorDiv(now, w) * w; start == cs+w {
		cs, cur, prev = start, 0, cur
	} else if start > cs || cur == 0 && prev == 0 {
		cs, cur, prev = start, 0, 0 // two or more windows later (an empty state too, whatever the epoch)
	}
	// A clock gone back into an earlier window counts with elapsed 0, where prev weighs the most.
	used := cur + mulDivCeil(prev, w-max(0, now-cs), w)
	d := Decision{Limit: s.limit, Remaining: max(0, s.limit-used)}
	d.ResetAfter = s.resetAfter(now, cs, cur, prev)
	d.TTL = d.ResetAfter
	if r.Partial && n > d.Remaining {
		n = d.Remaining
		if n == 0 {
			d.RetryAfter = s.retryAfter(now, cs, cur, prev, 1)
			return d
		}
	}
	if n > s.limit {
		d.RetryAfter = Never
		return d
	}
	if used+n > s.limit {
		d.RetryAfter = s.retryAfter(now, cs, cur, prev, n)
		return d
	}
	cur += n
	d.Allowed = true
	d.Granted = n
	d.Remaining = s.limit - used - n
	d.ResetAfter = s.resetAfter(now, cs, cur, prev)
	d.TTL = d.ResetAfter
	if n > 0 && !r.DryRun {
		// All of it, as the Lua twin writes it: a state SlidingWindowSub wrote (a rule whose
		// subwindows changed) has more words.
		st.W, st.Log = [4]int64{cs, cur, prev, 0}, st.Log[:0]
	}
	return d
}

// resetAfter is the time until the estimate falls to 0.
func (s *SlidingWindow) resetAfter(now, cs, cur, prev int64) int64 {
	switch {
	case cur > 0:
		return cs + 2*s.window - now
	case prev > 0:
		return cs + s.window - now
	}
	return 0
}

// retryAfter is the smallest wait after which n units fit, for a request denied now (n ≤ Limit).
func (s *SlidingWindow) retryAfter(now, cs, cur, prev, n int64) int64 {
	w := s.window
	if k := s.limit - cur - n; k >= 0 {
		// Fits once prev's weight has decayed enough; prev > 0, or the request would fit now.
		q, _ := mulDiv(k, w, prev)
		return cs + w - q - now
	}
	// Only once cur has become the previous window's count; cur > 0 since n ≤ Limit.
	q, _ := mulDiv(s.limit-n, w, cur)
	return cs + 2*w - q - now
}
