package algos

// SettleSuffix ends the name of a settlement's script: token_bucket_settle settles
// token_bucket's requests.
const SettleSuffix = "_settle"

// Settle charges a request the cost its response told (an LLM's token usage) once the response
// has ended, against the estimate it reserved when it was admitted. It is an Algorithm so that
// every store runs it as it runs the others: Decide is the transition, Script its Lua twin. A
// request's Cost is the actual cost and Now the store's time; the estimate and the time since
// admission are the settlement's own (NewSettle). MaxWait, Partial, ID and Release are not used;
// a dry run changes nothing. The Decision is always Allowed, with Granted the units debited or
// credited, and Limit, Remaining and ResetAfter as a peek would report after it.
//
// The difference actual − estimate is applied without a check: a debit may take the budget
// below zero (a bucket's TAT beyond τ, a window's count above Limit), and later requests are then
// denied, with the Retry-After of the debt, until it has been paid back; a credit gives units
// back. Each transition's doc comment says what it keeps exact. Settle works with the token
// bucket (GCRA), the fixed window and the (two-window) sliding window; Settles tells.
type Settle struct {
	alg           Algorithm // never a Ban: a settlement starts no ban
	estimate, age int64
	script        Script
}

// Settles reports whether alg (or the algorithm it bans with) can settle a late cost.
func Settles(alg Algorithm) bool {
	if b, ok := alg.(*Ban); ok {
		alg = b.inner
	}
	switch alg.(type) {
	case *GCRA, *FixedWindow, *SlidingWindow:
		return true
	}
	return false
}

// NewSettle returns the settlement, under alg, of a request admitted age µs ago (on the
// settling node's clock) with estimate units reserved; nil if alg cannot settle (Settles).
// Estimate and age are clamped to [0, MaxCount] and [0, MaxSpan].
func NewSettle(alg Algorithm, estimate, age int64) *Settle {
	if b, ok := alg.(*Ban); ok {
		alg = b.inner // the state is the inner algorithm's; the ban key is not touched
	}
	if !Settles(alg) {
		return nil
	}
	estimate, age = min(max(estimate, 0), MaxCount), min(max(age, 0), MaxSpan)
	sc := alg.Script()
	args := append(append(make([]int64, 0, len(sc.Args)+2), sc.Args...), estimate)
	if _, ok := alg.(*GCRA); !ok {
		args = append(args, age) // the windows place the reservation in time; the bucket needs no time
	}
	return &Settle{alg: alg, estimate: estimate, age: age,
		script: Script{Name: sc.Name + SettleSuffix, Args: args, Limit: sc.Limit}}
}

// StateOf returns the algorithm whose state alg reads and writes: the algorithm a Settle settles
// or a Refund gives units back to, else alg itself. A store that keys states by algorithm (the
// Envoy filter's slots) keys them by it.
func StateOf(alg Algorithm) Algorithm {
	switch a := alg.(type) {
	case *Settle:
		return a.alg
	case *Refund:
		return a.alg
	}
	return alg
}

// Script implements Algorithm: KEYS = {the state key}, ARGV as for the algorithm settled, whose
// arguments are followed by the estimate and, for a window, the age.
func (s *Settle) Script() Script { return s.script }

// Decide implements Algorithm.
func (s *Settle) Decide(st *State, r Request) Decision {
	delta := min(max(r.Cost, 0), MaxCount) - s.estimate
	switch a := s.alg.(type) {
	case *GCRA:
		return a.settle(st, r.Now, delta, r.DryRun)
	case *FixedWindow:
		return a.settle(st, r.Now, delta, r.Now-s.age, r.DryRun)
	case *SlidingWindow:
		return a.settle(st, r.Now, delta, r.Now-s.age, r.DryRun)
	}
	return Decision{Allowed: true}
}

// settle moves TAT by delta·T: later by a debit, to at most τ + MaxSpan ahead of now (ten years
// of debt beyond an empty bucket: never lowered by a debit, should a delay have put it further),
// earlier by a credit, to now at the earliest (a full bucket). |delta| counts at most as many
// whole buckets as MaxSpan holds (at most MaxCount units), so that d·T ≤ MaxSpan.
//
// Why a credit is exact: TAT grows by n·T with each admission and is raised to now only when the
// bucket is full; so TAT − (estimate − actual)·T, raised to now, is the TAT the request would
// have left had it cost actual from the start, unless the bucket was full in between, when both
// are now.
func (g *GCRA) settle(st *State, now, delta int64, dry bool) Decision {
	tat, frac := st.W[0], st.W[1]
	if tat < now {
		tat, frac = now, 0
	}
	x := span{tat - now, frac}
	// At most as many whole buckets as MaxSpan holds: d·T ≤ MaxSpan, exact in Lua too.
	most, buckets := int64(MaxCount), MaxSpan/g.tau.ceil()
	if buckets <= MaxCount/g.burst {
		most = g.burst * buckets
	}
	d := min(max(delta, -delta), most)
	move := spanOf(d, g.period, g.rate)
	next := x
	switch {
	case delta > 0:
		next = x.add(move, g.rate)
		if top := g.tau.add(span{MaxSpan, 0}, g.rate); top.less(next) {
			next = top
			if top.less(x) {
				next = x
			}
		}
	case delta < 0 && move.less(x):
		next = x.sub(move, g.rate)
	case delta < 0:
		next = span{}
	}
	if next != x && !dry {
		st.W[0], st.W[1] = now+next.us, next.frac
	}
	dec := Decision{Allowed: true, Limit: g.burst, Remaining: g.remaining(next), ResetAfter: next.ceil(), Granted: d}
	dec.TTL = dec.ResetAfter
	return dec
}

// settle adds a debit to the count of the state's window (the current one), to at most MaxCount:
// the units count in the window the response ended in, and a debt ends with that window, as
// every count of a fixed window does. A credit comes off the count only while the window is the
// one the request was admitted in (at = now − age): once it has ended, its units are forgotten
// anyway, and crediting them to another window would let that one admit more than Limit. The
// settling node measures age from before the admission, so at is never after it: a credit is
// dropped (charged in full) only when a window boundary fell within the admission's round trip.
func (f *FixedWindow) settle(st *State, now, delta, at int64, dry bool) Decision {
	ws, count := st.W[0], st.W[1]
	start := floorDiv(now, f.window) * f.window
	if start > ws || count == 0 {
		ws, count = start, 0
	}
	moved := int64(0)
	switch {
	case delta > 0:
		moved = min(delta, MaxCount-count)
		count += moved
	case delta < 0 && ws == start && floorDiv(at, f.window)*f.window == ws:
		moved = min(-delta, count)
		count -= moved
	}
	if moved > 0 && !dry {
		st.W[0], st.W[1] = ws, count
	}
	dec := Decision{Allowed: true, Limit: f.limit, Remaining: max(0, f.limit-count), Granted: moved}
	if count > 0 {
		dec.ResetAfter = ws + f.window - now
	}
	dec.TTL = dec.ResetAfter
	return dec
}

// settle adds a debit to the current window's count, to at most MaxCount: it weighs in the
// estimate of this window and, decaying, of the next. A credit comes off the count of the window
// the request was admitted in (at = now − age), the current or the previous one, so that the
// estimate is what it would be had the request cost actual from the start; an older window no
// longer counts, and nothing comes back from it.
func (s *SlidingWindow) settle(st *State, now, delta, at int64, dry bool) Decision {
	w := s.window
	cs, cur, prev := st.W[0], st.W[1], st.W[2]
	start := floorDiv(now, w) * w
	if start == cs+w {
		cs, cur, prev = start, 0, cur
	} else if start > cs || cur == 0 && prev == 0 {
		cs, cur, prev = start, 0, 0
	}
	moved := int64(0)
	aw := floorDiv(at, w) * w
	switch {
	case delta > 0:
		moved = min(delta, MaxCount-cur)
		cur += moved
	case delta < 0 && cs == start && aw == cs:
		moved = min(-delta, cur)
		cur -= moved
	case delta < 0 && cs == start && aw == cs-w:
		moved = min(-delta, prev)
		prev -= moved
	}
	if moved > 0 && !dry {
		st.W, st.Log = [4]int64{cs, cur, prev, 0}, st.Log[:0]
	}
	used := cur + mulDivCeil(prev, w-max(0, now-cs), w)
	dec := Decision{Allowed: true, Limit: s.limit, Remaining: max(0, s.limit-used), Granted: moved}
	dec.ResetAfter = s.resetAfter(now, cs, cur, prev)
	dec.TTL = dec.ResetAfter
	return dec
}
