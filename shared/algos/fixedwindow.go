package algos

// FixedWindow counts admitted units per window of Window µs aligned to multiples of Window since
// the epoch of Request.Now, and admits at most Limit units per window.
//
// With ws the start of the window the state counts in (the current window ⌊now/Window⌋·Window,
// or the stored one if it lies ahead) and count the units already admitted in it, a request of
// cost n at time now is decided as
//
//	wait = max(0, ws − now)                   // > 0 only if the stored window lies ahead
//	count + n > Limit → ws += Window, count = 0, wait = ws − now   // try the next window
//	wait > MaxWait    → deny; RetryAfter = wait, Never if n > Limit; state unchanged
//	otherwise         → admit with Delay = wait; store ws, count + n
//	Remaining = Limit − count,  ResetAfter = ws + Window − now (0 while count = 0)
//
// The price of its simplicity is the known burst at a boundary: Limit units at the end of one
// window and Limit more at the start of the next pass within a few µs of each other.
//
// The stored window lies ahead of now only after an admission delayed into the next window
// (MaxWait) or when the clock went back into an earlier window. Either way the request counts in
// the stored window and waits for it to start: counting it in an earlier window would reset the
// count (a backwards clock adding capacity), and admitting it at once would let more than Limit
// units pass before the stored window starts. Cost 0 peeks. A partial request takes
// min(n, Limit − count) units of the window ws, or is denied until the next window if none are
// left. TTL = ResetAfter: once the window has passed, an empty state decides the same.
//
// Bounds: 1 ≤ Limit ≤ MaxCount, 1 µs ≤ Window ≤ MaxSpan; nothing multiplies them.
//
// State: W[0] = ws (µs), W[1] = count (0 < count ≤ Limit; 0 only for an empty state).
type FixedWindow struct {
	limit, window int64
	script        Script
}

// NewFixedWindow returns a limit of limit units per aligned window of window µs.
func NewFixedWindow(limit, window int64) (*FixedWindow, error) {
	const name = "fixed_window"
	if err := count(name, "limit", limit); err != nil {
		return nil, err
	}
	if err := duration(name, "window", window); err != nil {
		return nil, err
	}
	f := &FixedWindow{limit: limit, window: window}
	f.script = Script{Name: name, Args: []int64{limit, window}, Limit: limit}
	return f, nil
}

// Script implements Algorithm.
func (f *FixedWindow) Script() Script { return f.script }

// Decide implements Algorithm.
func (f *FixedWindow) Decide(st *State, r Request) Decision {
	now, n := r.Now, r.Cost
	ws, count := st.W[0], st.W[1]
	if start := floorDiv(now, f.window) * f.window; start > ws || count == 0 {
		ws, count = start, 0 // a new window (an empty state too, whatever the epoch)
	}
	wait := max(0, ws-now)
	d := Decision{Limit: f.limit, Remaining: max(0, f.limit-count)} // count > Limit after a settled debt (Settle)
	if count > 0 {
		d.ResetAfter = ws + f.window - now
	}
	d.TTL = d.ResetAfter
	if r.Partial && n > d.Remaining {
		n = d.Remaining
		if n == 0 {
			d.RetryAfter = ws + f.window - now
			return d
		}
	}
	if n > f.limit {
		d.RetryAfter = Never
		return d
	}
	if count+n > f.limit {
		ws, count = ws+f.window, 0
		wait = ws - now
	}
	if wait > r.MaxWait {
		d.RetryAfter = wait
		return d
	}
	count += n
	d.Allowed = true
	d.Delay = wait
	d.Granted = n
	d.Remaining = f.limit - count
	d.ResetAfter = 0
	if count > 0 {
		d.ResetAfter = ws + f.window - now
	}
	d.TTL = d.ResetAfter
	if n > 0 && !r.DryRun {
		st.W[0], st.W[1] = ws, count
	}
	return d
}
