// Package lograte keeps a flood of events from flooding a log: at most one line a second per
// kind of event, the next one saying how many were held back. The metrics count every event;
// the log shows that they happen, and why.
package lograte

import (
	"sync/atomic"
	"time"
)

// Limiter lets at most one event a second through. Its zero value is ready; it is safe for
// concurrent use.
type Limiter struct {
	next    atomic.Int64 // unix ns from which the next event may pass
	skipped atomic.Int64
}

// Allow reports whether an event may be logged now, and how many were held back since the last
// one that was.
func (l *Limiter) Allow() (ok bool, skipped int64) {
	now := time.Now().UnixNano()
	next := l.next.Load()
	if now < next || !l.next.CompareAndSwap(next, now+int64(time.Second)) {
		l.skipped.Add(1)
		return false, 0
	}
	return true, l.skipped.Swap(0)
}
