package algos

// MaxLogLimit is the largest limit a SlidingLog accepts. The log keeps one entry per admitted
// unit, at most 2·limit of them (see SlidingLog), so an identity costs up to 160 KB in process
// memory at this cap and 20,000 sorted-set members in Redis. Larger limits want a counting
// algorithm (GCRA, sliding window).
const MaxLogLimit = 10_000

// SlidingLog is the exact sliding window: it admits at most Limit units in any Window µs, by
// keeping the time of every admitted unit.
//
// State: Log holds, in ascending order, the time (µs) of each admitted unit, one entry per unit
// of cost (in Redis: a sorted set, score = time, member "time:seq"). The entries e ≤ now − Window
// have left the window ("old"); the others are "live". A request of cost n at time now is decided
// as
//
//	live = len(Log) − old;  k = live + n − Limit
//	n > Limit   → deny; RetryAfter = Never
//	k ≤ 0       → admit at t = max(now, newest entry)
//	otherwise     wait = (k-th oldest live entry) + Window − now: then the request fits
//	  wait ≤ min(MaxWait, Window) → admit with Delay = wait at t = max(now + wait, newest entry)
//	  else      → deny; RetryAfter = wait
//	admit: drop the old entries, append n entries t
//	Remaining = max(0, Limit − live),  ResetAfter = TTL = newest + Window − now (0 if no entry
//	is live: from then on an empty log decides the same)
//
// Every figure is exact. RetryAfter is the earliest time the request fits. As long as the state
// is kept, any half-open interval (s − Window, s] holds at most Limit recorded entries: an entry
// recorded at t is checked against every entry > t − Window, since the log drops only entries
// ≤ now − Window ≤ t − Window and t never decreases. So there is no burst at a window boundary,
// unlike FixedWindow. Cost 0 peeks. A partial request takes min(n, Remaining) units; with none
// left it is denied with the RetryAfter of one unit.
//
// A clock that goes backwards adds no capacity: a request is judged by its own now against every
// entry recorded, and old entries are dropped only when units are recorded, never by a peek or a
// denial, so a later now seen only by those cannot free capacity for an earlier one (dropping
// eagerly would: the units admitted after such a drop would be recorded before entries already
// dropped). Units are recorded no earlier than the newest entry, which keeps the log sorted.
//
// A waiting request is recorded at its admission time now + Delay, and its units count against
// every request after it (a reservation). Waits are capped at one Window: the k oldest live
// entries are then ≤ now, so k ≤ Limit and the log never holds more than 2·Limit entries,
// whatever MaxWait asks.
//
// Bounds: 1 ≤ Limit ≤ MaxLogLimit (the state holds an entry per unit), 1 µs ≤ Window ≤ MaxSpan.
type SlidingLog struct {
	limit, window int64
	script        Script
}

// NewSlidingLog returns a sliding log admitting limit units in any window µs.
func NewSlidingLog(limit, window int64) (*SlidingLog, error) {
	const name = "sliding_log"
	if err := positive(name, "limit", limit); err != nil {
		return nil, err
	}
	if err := atMost(name, "limit", limit, MaxLogLimit); err != nil {
		return nil, err
	}
	// Entries are recorded at most one Window after the latest now, so newest + Window stays
	// below 2^53 for any now below 2^52 (the year 2112).
	if err := duration(name, "window", window); err != nil {
		return nil, err
	}
	s := &SlidingLog{limit: limit, window: window}
	s.script = Script{Name: name, Args: []int64{limit, window}, Limit: limit, Log: true}
	return s, nil
}

// Script implements Algorithm.
func (s *SlidingLog) Script() Script { return s.script }

// SlidingWindow implements Sliding.
func (s *SlidingLog) SlidingWindow() int64 { return s.window }

// Decide implements Algorithm. Only an admission changes st.Log (never a dry run): it drops the
// old entries by copying the live ones down and appends, so the backing array is reused and a
// steady load allocates nothing.
func (s *SlidingLog) Decide(st *State, r Request) Decision {
	now, n := r.Now, r.Cost
	log := st.Log
	// old = the number of entries ≤ now − Window, by binary search: denials must stay cheap.
	old, hi := 0, len(log)
	for old < hi {
		m := int(uint(old+hi) >> 1)
		if log[m] <= now-s.window {
			old = m + 1
		} else {
			hi = m
		}
	}
	live := int64(len(log) - old)
	d := Decision{Limit: s.limit, Remaining: max(0, s.limit-live)}
	if live > 0 {
		d.ResetAfter = log[len(log)-1] + s.window - now
	}
	d.TTL = d.ResetAfter
	if r.Partial && n > d.Remaining {
		n = d.Remaining
		if n == 0 {
			d.RetryAfter = log[int64(old)+live-s.limit] + s.window - now
			return d
		}
	}
	if n > s.limit {
		d.RetryAfter = Never
		return d
	}
	if k := live + n - s.limit; k > 0 {
		wait := log[int64(old)+k-1] + s.window - now
		if wait > min(r.MaxWait, s.window) {
			d.RetryAfter = wait
			return d
		}
		d.Delay = wait
	}
	d.Allowed = true
	d.Granted = n
	if n == 0 {
		return d
	}
	t := now + d.Delay
	last := t // the newest entry once these are in
	if len(log) > 0 {
		last = max(t, log[len(log)-1])
		if !r.Backdated {
			t = last
		}
	}
	d.Remaining = max(0, s.limit-live-n)
	d.ResetAfter = last + s.window - now
	d.TTL = d.ResetAfter
	if r.DryRun {
		return d
	}
	if old > 0 {
		log = log[:copy(log, log[old:])]
	}
	at := len(log) // where the units go: the end, unless backdated before later entries
	for at > 0 && log[at-1] > t {
		at--
	}
	for range n {
		log = append(log, t)
	}
	if moved := len(log) - int(n) - at; moved > 0 { // keep the log sorted: later entries after the new ones
		copy(log[at+int(n):], log[at:at+moved])
		for i := range int(n) {
			log[at+i] = t
		}
	}
	st.Log = log
	return d
}
