package server

import "testing"

// The pool lends whole 32 KiB buffers, and keeps only those: a buffer of another length (which
// no reverse proxy hands back, but Put's contract allows) is dropped, never lent.
func TestBufferPool(t *testing.T) {
	var p bufferPool
	for _, tc := range []struct {
		name string
		put  []byte
	}{
		{"whole", make([]byte, bufferSize)},
		{"short", make([]byte, 100)},
		{"long", make([]byte, 2*bufferSize)},
		{"resliced", make([]byte, bufferSize)[:bufferSize/2]},
	} {
		p.Put(tc.put)
		if got := p.Get(); len(got) != bufferSize || cap(got) != bufferSize {
			t.Errorf("%s: Get after Put returned len %d cap %d, want %d", tc.name, len(got), cap(got), bufferSize)
		}
	}
}
