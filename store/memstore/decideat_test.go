package memstore

import (
	"testing"

	"github.com/diana-gw/diana/shared/algos"
)

// DecideAt decides at the request's time, not the store's clock: requests placed in the past
// of a sliding log leave it a window after their own time, and the store's later requests
// follow on the same state.
func TestDecideAt(t *testing.T) {
	now := int64(1_700_000_000_000_000)
	s := New(Options{Clock: func() int64 { return now }})
	sl, err := algos.NewSlidingLog(3, algos.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if d := s.DecideAt("k", sl, algos.Request{Now: now - 50*algos.Second, Cost: 2}); !d.Allowed {
		t.Fatalf("past request: %+v", d)
	}
	if d := s.DecideAt("k", sl, algos.Request{Now: now - 10*algos.Second, Cost: 1}); !d.Allowed {
		t.Fatalf("second past request: %+v", d)
	}
	if d := s.Decide("k", sl, algos.Request{Cost: 1}); d.Allowed {
		t.Fatalf("now, with 3 in the last minute: %+v, want a denial", d)
	}
	now += 11 * algos.Second // the two at −50s have left the window; the one at −10s has not
	for i, want := range []bool{true, true, false} {
		if d := s.Decide("k", sl, algos.Request{Cost: 1}); d.Allowed != want {
			t.Fatalf("11s later, request %d: %+v, want allowed %v", i, d, want)
		}
	}
}
