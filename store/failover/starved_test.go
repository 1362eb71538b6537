package failover

import "time"

// recordedSince reports whether the runtime recorded a scheduling wait of at least min since the
// newer snapshot: whichever snapshot the next tick keeps as the older one, that wait lies in the
// window longest reads.
func (s *starvation) recordedSince(min time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.histogram()
	if h == nil || s.cur == nil || len(s.cur) != len(h.Counts) {
		return false
	}
	for i := len(h.Counts) - 1; i >= 0 && h.Buckets[i]*float64(time.Second) >= float64(min); i-- {
		if h.Counts[i] > s.cur[i] {
			return true
		}
	}
	return false
}
