package algos

// RefundSuffix ends the name of a refund's script: fixed_window_refund gives back fixed_window's
// units.
const RefundSuffix = "_refund"

// Refund gives back to a shared store units of one batch grant that a node did not spend (see
// Batching.Refund). It is an Algorithm so that every store runs it as it runs the others: Decide
// is the transition, Script its Lua twin. A request's Cost is the number of units given back and
// Now the store's time; MaxWait, Partial, ID and Release are not used; a dry run takes nothing
// back. The Decision is Allowed,
// with Granted the units the state took back (0 when it could not take any back safely), and
// Limit, Remaining and ResetAfter as a peek of the batch algorithm would report after it.
//
// The state takes units back only where that cannot let the cluster admit more than the limit:
// the units are then as if never granted. Each transition's doc comment says why.
type Refund struct {
	alg    Algorithm // the batch algorithm (never a Ban: a refund starts no ban)
	at     int64     // µs on the store's clock: when the units were granted
	script Script
}

// Script implements Algorithm: KEYS = {the state key}, ARGV as for the batch algorithm, whose
// arguments are followed by at.
func (f *Refund) Script() Script { return f.script }

// Decide implements Algorithm.
func (f *Refund) Decide(st *State, r Request) Decision {
	n := max(0, r.Cost)
	if r.DryRun {
		n = 0
	}
	switch a := f.alg.(type) {
	case *FixedWindow:
		return a.refund(st, f.at, n, r.Now)
	case *SlidingLog:
		return a.refund(st, f.at, n, r.Now)
	}
	return Decision{Allowed: true}
}

// refundable returns the Refund of alg's units granted at at, or nil if alg takes none back.
func refundable(alg Algorithm, at int64) *Refund {
	if b, ok := alg.(*Ban); ok {
		alg = b.inner // the state is the inner algorithm's; the ban key is not touched
	}
	if !takesBack(alg) {
		return nil
	}
	sc := alg.Script()
	args := append(append(make([]int64, 0, len(sc.Args)+1), sc.Args...), at)
	return &Refund{alg: alg, at: at, script: Script{Name: sc.Name + RefundSuffix, Args: args, Limit: sc.Limit, Log: sc.Log}}
}

// refund takes back up to n units granted at at, at time now: only while the window the state
// counts in is the current one and is the window of at, by lowering its count (never below 0).
//
// Why this never over-admits: a batch grant is a partial request without wait, so its units
// count in the window of its grant time, W = ⌊at/Window⌋·Window, and Batching.Life ends them
// within W. The units a node gives back it has dropped and never spends. So at any time the
// count of W is at least the units granted in W and not given back, which hold every unit spent
// from W's grants; as the count never exceeds Limit, neither do they. Units given back after W
// ended (or before the state reached W, after a clock step) are not taken back: crediting them
// to another window would let it admit more than Limit.
func (f *FixedWindow) refund(st *State, at, n, now int64) Decision {
	ws, count := st.W[0], st.W[1]
	cur := floorDiv(now, f.window) * f.window
	back := int64(0)
	if count > 0 && ws == cur && floorDiv(at, f.window)*f.window == cur {
		back = min(n, count)
		count -= back
		st.W[1] = count
	}
	d := Decision{Allowed: true, Limit: f.limit, Remaining: f.limit, Granted: back}
	if count > 0 && ws >= cur {
		d.Remaining = f.limit - count
		d.ResetAfter = ws + f.window - now
	}
	d.TTL = d.ResetAfter
	return d
}

// refund takes back up to n of the entries recorded at at (the newest of them: the Lua twin's
// members "at:seq" must stay numbered 1..count).
//
// Why this never over-admits: a batch grant records its units at one time, which the store
// reports (redisstore: in the granted request's Now) and the node gives back with them. Entries
// of one time are interchangeable, so the log is then exactly what it would hold had those units
// never been granted: a log of fewer entries, every window of which holds at most Limit of them
// (each admission was checked against a superset). The units given back are never spent, and every
// unit spent was recorded; so Batching's argument for the longer window holds unchanged.
func (s *SlidingLog) refund(st *State, at, n, now int64) Decision {
	log := st.Log
	lo, hi := 0, len(log) // the entries equal to at are log[lo:hi]
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if log[m] < at {
			lo = m + 1
		} else {
			hi = m
		}
	}
	hi = lo
	for hi < len(log) && log[hi] == at {
		hi++
	}
	back := min(n, int64(hi-lo))
	if back > 0 {
		log = append(log[:hi-int(back)], log[hi:]...)
		st.Log = log
	}
	old := 0
	for old < len(log) && log[old] <= now-s.window {
		old++
	}
	live := int64(len(log) - old)
	d := Decision{Allowed: true, Limit: s.limit, Remaining: max(0, s.limit-live), Granted: back}
	if live > 0 {
		d.ResetAfter = log[len(log)-1] + s.window - now
	}
	d.TTL = d.ResetAfter
	return d
}

// takesBack tells whether alg (or the algorithm it bans with) has a refund.
func takesBack(alg Algorithm) bool {
	if b, ok := alg.(*Ban); ok {
		alg = b.inner
	}
	switch alg.(type) {
	case *FixedWindow, *SlidingLog:
		return true
	}
	return false
}
