package lograte

import (
	"sync"
	"testing"
	"time"
)

// Of a burst from many goroutines one event passes; a second later the next passes and
// carries the count of the others.
func TestLimiter(t *testing.T) {
	var l Limiter
	var wg sync.WaitGroup
	var mu sync.Mutex
	passed := 0
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if ok, _ := l.Allow(); ok {
				mu.Lock()
				passed++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if passed != 1 {
		t.Fatalf("%d of a burst of 100 passed, want 1", passed)
	}
	time.Sleep(time.Second)
	if ok, skipped := l.Allow(); !ok || skipped != 99 {
		t.Fatalf("a second later: %v, %d held back; want true, 99", ok, skipped)
	}
}
