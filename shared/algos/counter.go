package algos

// Counter counts every unit asked for per window of Window µs aligned to multiples of Window
// since the epoch of Request.Now, and leaves the comparison with a limit to its caller: it is
// envoyproxy/ratelimit's counting, where every hit counts, over the limit or not, and the rate
// limit service compares the count with requests_per_unit (package rls). It is FixedWindow
// without a limit of its own, written for Redis's CPU: its script changes one field of a hash
// with HINCRBY instead of reading, parsing and rewriting a string state.
//
// With ws the start of the window the state counts in (the current window ⌊now/Window⌋·Window,
// or the stored one if it lies ahead) and count the units already counted in it, a request of
// cost n at time now is decided as
//
//	count + n > MaxCount → deny; RetryAfter = ws + Window − now; state unchanged
//	otherwise            → admit; store ws, count + n
//	Limit = MaxCount, Remaining = MaxCount − count,  ResetAfter = ws + Window − now (0 while count = 0)
//
// The stored window lies ahead of now only when the clock went back into an earlier window; the
// units then count in the stored window, at once (a counter never waits: MaxWait is not read),
// so that a backwards clock never resets a count. Cost 0 and dry runs peek. A partial request
// takes min(n, MaxCount − count) units, or is denied until the next window if none are left.
// TTL = ResetAfter.
//
// Bounds: 1 ms ≤ Window ≤ MaxSpan. The script names a window by its index ⌊now/Window⌋, which
// stays below 10^14, where Redis writes a Lua number as an exact integer, for times below 2^52
// µs (the year 2112) and windows of at least 1 ms.
//
// State: W[0] = ws (µs), W[1] = count (0 < count ≤ MaxCount; 0 only for an empty state). In
// Redis: a hash of one field, the index of ws, holding count (Script.Hash).
type Counter struct {
	window int64
	script Script
}

// NewCounter returns a counter of units per aligned window of window µs.
func NewCounter(window int64) (*Counter, error) {
	const name = "counter"
	if err := duration(name, "window", window); err != nil {
		return nil, err
	}
	if window < Millisecond {
		return nil, paramError(name, "window", "must be at least 1 ms, got "+about(window))
	}
	return &Counter{window: window, script: Script{Name: name, Args: []int64{window}, Limit: MaxCount, Hash: true}}, nil
}

// Script implements Algorithm.
func (c *Counter) Script() Script { return c.script }

// Decide implements Algorithm.
func (c *Counter) Decide(st *State, r Request) Decision {
	now, n := r.Now, r.Cost
	ws, count := st.W[0], st.W[1]
	if start := floorDiv(now, c.window) * c.window; start > ws || count == 0 {
		ws, count = start, 0
	}
	d := Decision{Limit: MaxCount, Remaining: MaxCount - count}
	if count > 0 {
		d.ResetAfter = ws + c.window - now
	}
	if r.Partial {
		n = min(n, d.Remaining)
	}
	if count+n > MaxCount || (r.Partial && n == 0 && r.Cost > 0) {
		d.RetryAfter = ws + c.window - now
		d.TTL = d.ResetAfter
		return d
	}
	count += n
	d.Allowed = true
	d.Granted = n
	d.Remaining = MaxCount - count
	d.ResetAfter = 0
	if count > 0 {
		d.ResetAfter = ws + c.window - now
	}
	d.TTL = d.ResetAfter
	if n > 0 && !r.DryRun {
		st.W[0], st.W[1] = ws, count
	}
	return d
}
