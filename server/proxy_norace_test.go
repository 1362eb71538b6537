//go:build !race

package server

import "testing"

// The pool of copy buffers costs no allocation once warm: Put keeps the array, not a boxed
// slice. (The race detector makes sync.Pool drop items at random, hence !race.)
func TestBufferPoolAllocs(t *testing.T) {
	buffers.Put(buffers.Get())
	if n := testing.AllocsPerRun(1000, func() { buffers.Put(buffers.Get()) }); n != 0 {
		t.Errorf("Get and Put: %v allocations, want 0", n)
	}
}
