package failover

import (
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"
)

// schedLatencies is the runtime's histogram of the time goroutines spent runnable before they
// ran: long waits there mean the process did not get the CPU it asked for.
const schedLatencies = "/sched/latencies:seconds"

// starvation tells a timeout that the process caused from one that Redis did. On a busy machine
// a goroutine can wait longer for a CPU than the Redis timeout, so a round trip that Redis
// answered in time still ends in a timeout. Such a timeout says nothing about Redis, and counting
// it opened the breaker with no fault in sight (then every request went to the fail policy for a
// whole open period).
//
// It keeps two snapshots of the runtime's scheduling latencies, the newer at most a second old,
// taken from Decide at most once a second; at a timeout, the waits recorded since the older one
// (one to two seconds back) are the process's recent history. The runtime samples these waits,
// so a short starvation can go unseen: that timeout then counts, as every timeout did before.
type starvation struct {
	at   atomic.Int64 // unix ns of the newer snapshot
	mu   sync.Mutex
	old  []uint64 // bucket counts of the older snapshot; nil until two were taken
	cur  []uint64
	read []metrics.Sample
}

// snapshotEvery is how often Decide renews the snapshots.
const snapshotEvery = time.Second

// tick renews the snapshots when the newer one is older than snapshotEvery. It costs one atomic
// load on the hot path.
func (s *starvation) tick(now time.Time) {
	if now.UnixNano()-s.at.Load() < int64(snapshotEvery) || !s.mu.TryLock() {
		return
	}
	defer s.mu.Unlock()
	if now.UnixNano()-s.at.Load() < int64(snapshotEvery) {
		return
	}
	h := s.histogram()
	if h == nil {
		return
	}
	s.old, s.cur = s.cur, append(s.old[:0], h.Counts...)
	s.at.Store(now.UnixNano())
}

// longest returns a lower bound of the longest scheduling wait since the older snapshot (0 when
// none was taken yet, or the runtime does not report the waits).
func (s *starvation) longest() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	base := s.old
	if base == nil {
		base = s.cur
	}
	h := s.histogram()
	if h == nil || base == nil || len(base) != len(h.Counts) {
		return 0
	}
	for i := len(h.Counts) - 1; i >= 0; i-- {
		if h.Counts[i] > base[i] {
			lo := h.Buckets[i] // bucket i holds waits in [Buckets[i], Buckets[i+1])
			if lo <= 0 {
				return 0
			}
			return time.Duration(lo * float64(time.Second))
		}
	}
	return 0
}

// histogram reads the runtime's scheduling latencies; s.mu must be held.
func (s *starvation) histogram() *metrics.Float64Histogram {
	if s.read == nil {
		s.read = []metrics.Sample{{Name: schedLatencies}}
	}
	metrics.Read(s.read)
	if s.read[0].Value.Kind() != metrics.KindFloat64Histogram {
		return nil
	}
	return s.read[0].Value.Float64Histogram()
}
