package failover

import (
	"sync"
	"sync/atomic"
	"time"
)

// isOpen is breaker.state while the breaker is open.
const isOpen = -1

// unknownRetry is the RetryAfter of a fail-closed denial when no probe is scheduled: the breaker
// is closed (Redis failed but not often enough to open it) or a probe is under way.
const unknownRetry = time.Second

// breaker counts consecutive failed round trips and opens after failures of them. While open it
// lets one probe through every open period (a failed probe schedules the next: one call per
// period is no load on a Redis that is down, and a Redis that is back is found within a period).
// Any success closes it.
type breaker struct {
	// state is the count of consecutive failures while closed (≥ 0), or isOpen. It changes only
	// under mu; the hot path (closed, no failures) reads nothing else.
	state atomic.Int32

	failures int32
	openFor  time.Duration
	onState  func(open bool)

	mu      sync.Mutex
	epoch   uint64    // counts openings, so that a late probe cannot touch a later open period
	probeAt time.Time // while open: when the next probe may go
	probing bool      // while open: a probe is under way
}

// ticket is what a call that may go to Redis carries back to the breaker with its outcome.
type ticket struct {
	probe bool
	epoch uint64
}

// enter says whether a call may go to Redis: always while closed; while open, only the one
// caller that takes the due probe. A caller that may not gets the time until the next probe.
func (b *breaker) enter() (t ticket, ok bool, retry time.Duration) {
	if b.state.Load() != isOpen {
		return ticket{}, true, 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state.Load() != isOpen { // closed meanwhile
		return ticket{}, true, 0
	}
	now := time.Now()
	if !b.probing && !now.Before(b.probeAt) {
		b.probing = true
		return ticket{probe: true, epoch: b.epoch}, true, 0
	}
	return ticket{}, false, b.untilProbe(now)
}

// success records a round trip that Redis answered: the breaker closes and the count restarts.
func (b *breaker) success() {
	if b.state.Load() == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state.Load() == isOpen {
		b.probing = false
		b.state.Store(0)
		if b.onState != nil {
			b.onState(false)
		}
		return
	}
	b.state.Store(0)
}

// failure records a round trip that Redis did not answer and returns the time until the next
// probe (unknownRetry when none is scheduled).
func (b *breaker) failure(t ticket) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	if b.state.Load() == isOpen {
		// Calls that started before the breaker opened fail late: only the probe of this open
		// period tells something new.
		if t.probe && t.epoch == b.epoch {
			b.probing = false
			b.probeAt = now.Add(b.openFor)
		}
		return b.untilProbe(now)
	}
	n := b.state.Load() + 1
	if n < b.failures {
		b.state.Store(n)
		return unknownRetry
	}
	b.epoch++
	b.probeAt = now.Add(b.openFor)
	b.probing = false
	b.state.Store(isOpen)
	if b.onState != nil {
		b.onState(true)
	}
	return b.openFor
}

// cancel records a call whose caller went away before Redis answered: it says nothing about
// Redis. A probe gives its turn back, so that the next caller probes at once.
func (b *breaker) cancel(t ticket) {
	if !t.probe {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state.Load() == isOpen && t.epoch == b.epoch {
		b.probing = false
	}
}

// untilProbe returns the time from now until the next probe, or unknownRetry if it is due
// (under way). b.mu must be held.
func (b *breaker) untilProbe(now time.Time) time.Duration {
	if d := b.probeAt.Sub(now); d > 0 {
		return d
	}
	return unknownRetry
}
