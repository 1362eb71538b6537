package algos

// MaxConcurrency caps the leases a Concurrency limit may hold per identity: its state, in Go and
// in Redis, grows with the leases in flight.
const MaxConcurrency = 10_000

// Concurrency limits the requests in flight per identity: at most Max slots are taken at once.
// It is lua-resty-limit-traffic's limit.conn without its delay (a request over the limit is
// denied, never held), with leases that expire, so that a lease whose release is lost (a crashed
// node, a dropped connection) frees its slots LeaseTTL µs after it was taken.
//
// A request takes lease r.ID for n = r.Cost slots, or gives it back when r.Release is set. With
// the expired leases (expiry ≤ now) dropped first and used = the slots of the leases in flight,
//
//	take n ≥ 1:    used − held(ID) + n ≤ Max → admit: lease ID := (n slots, expiry
//	                                           max(now + LeaseTTL, latest expiry))
//	               otherwise                 → deny, state unchanged; RetryAfter = the expiry of
//	                                           the lease that holds the k-th earliest-expiring
//	                                           slot, k = used − held(ID) + n − Max, less now
//	                                           (Never if n > Max)
//	take 0:        a peek, always allowed
//	release:       drop lease ID if it is held (else nothing); always allowed, Granted 0
//	Remaining = Max − used,  ResetAfter = TTL = latest expiry − now (0 when nothing is in flight)
//
// RetryAfter is an upper bound: a release may free slots earlier. Taking an ID that is already
// held replaces that lease (its slots count as free for the decision): this renews or resizes a
// lease; if the new one is denied, the old one stays as it was. MaxWait and Partial are ignored.
//
// A clock that goes backwards drops no lease early, as a lease expires only once now reaches its
// expiry, and a new lease never expires before the leases already in flight: each expiry is at
// least the latest one, so the leases expire in the order they were taken.
//
// State: Log holds one triple (expiry µs, id, slots) per lease in flight, in expiry order. In
// Redis, a sorted set with one member "id:k" per slot k = 1..slots of each lease, scored with the
// lease's expiry, so that ZCARD counts the slots in flight.
//
// Bounds: 1 ≤ Max ≤ MaxConcurrency (the state holds an entry per lease), 1 µs ≤ LeaseTTL ≤ MaxSpan.
type Concurrency struct {
	max, ttl int64
	script   Script
}

// NewConcurrency returns a limit of max slots in flight per identity, each lease expiring
// leaseTTL µs after it was taken unless it is released first.
func NewConcurrency(max, leaseTTL int64) (*Concurrency, error) {
	const name = "concurrency"
	if err := positive(name, "max", max); err != nil {
		return nil, err
	}
	if err := atMost(name, "max", max, MaxConcurrency); err != nil {
		return nil, err
	}
	// now + leaseTTL must stay below 2^53 for any plausible now (2^53 µs is year 2255).
	if err := duration(name, "lease", leaseTTL); err != nil {
		return nil, err
	}
	c := &Concurrency{max: max, ttl: leaseTTL}
	c.script = Script{Name: name, Args: []int64{max, leaseTTL}, Limit: max, Log: true}
	return c, nil
}

// Script implements Algorithm.
func (c *Concurrency) Script() Script { return c.script }

// Decide implements Algorithm.
func (c *Concurrency) Decide(st *State, r Request) Decision {
	now, n := r.Now, r.Cost
	log := st.Log
	// Leases expire in log order: the expired ones are at the front. Shift in place so the
	// backing array is reused; a dry run only looks past them.
	i := 0
	for i < len(log) && log[i] <= now {
		i += 3
	}
	if r.DryRun {
		log = log[i:len(log):len(log)]
	} else {
		log = append(log[:0], log[i:]...)
	}
	used, at := int64(0), -1
	for j := 0; j < len(log); j += 3 {
		used += log[j+2]
		if log[j+1] == r.ID {
			at = j
		}
	}
	d := Decision{Limit: c.max, Allowed: true}
	switch {
	case r.Release:
		if at >= 0 {
			used -= log[at+2]
			switch {
			case !r.DryRun:
				log = append(log[:at], log[at+3:]...)
			case at == len(log)-3: // stores never ask for a dry release; answered all the same
				log = log[:at]
			}
		}
	case n > c.max:
		d.Allowed, d.RetryAfter = false, Never
	case n > 0:
		held := int64(0)
		if at >= 0 {
			held = log[at+2]
		}
		if need := used - held + n - c.max; need > 0 {
			// Wait for the earliest-expiring slots, other than the replaced lease's, to go;
			// need ≤ used − held, so the walk ends inside the log.
			d.Allowed = false
			for j := 0; need > 0; j += 3 {
				if j != at {
					need -= log[j+2]
				}
				d.RetryAfter = log[j] - now
			}
			break
		}
		expiry := now + c.ttl
		if len(log) > 0 {
			expiry = max(expiry, log[len(log)-3])
		}
		used += n - held
		d.Granted = n
		if r.DryRun { // the new lease would expire last
			d.Remaining, d.ResetAfter, d.TTL = c.max-used, expiry-now, expiry-now
			return d
		}
		if at >= 0 {
			log = append(log[:at], log[at+3:]...)
		}
		log = append(log, expiry, r.ID, n)
	}
	if !r.DryRun {
		st.Log = log
	}
	d.Remaining = c.max - used
	if len(log) > 0 {
		d.ResetAfter = log[len(log)-3] - now
	}
	d.TTL = d.ResetAfter
	return d
}
