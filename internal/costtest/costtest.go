// Package costtest bounds what a piece of work costs in a test: the bytes it allocates, and a
// deadline after which the test fails instead of hanging the run (a loop that never ends, a read
// that blocks forever). The deadline is a guard, not a speed target: set it far above the normal
// time.
package costtest

import (
	"runtime"
	"testing"
	"time"
)

// Check runs f and fails t if f allocates more than maxBytes or has not returned within
// deadline. It returns the bytes allocated. Other goroutines' allocations count too, so a test
// calling it should not run in parallel with others.
func Check(t testing.TB, what string, maxBytes uint64, deadline time.Duration, f func()) uint64 {
	t.Helper()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(deadline):
		t.Fatalf("%s: not done after %v", what, deadline)
	}
	runtime.ReadMemStats(&after)
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("%s: %d bytes allocated", what, alloc)
	if alloc > maxBytes {
		t.Errorf("%s: allocated %d bytes, more than %d", what, alloc, maxBytes)
	}
	return alloc
}
