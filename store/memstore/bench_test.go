package memstore

import (
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/diana-gw/diana/shared/algos"
)

// BenchmarkDecide is one decision of a known key at the store's own (monotonic) clock, as
// bench's BenchmarkMemory makes it: serially on one key, and in parallel over 10,000 keys.
func BenchmarkDecide(b *testing.B) {
	g := gcra(b, 1_000_000, algos.Second, 1000)
	keys := make([]string, 10_000)
	for i := range keys {
		keys[i] = "per-ip|10.0." + strconv.Itoa(i>>8) + "." + strconv.Itoa(i&255)
	}
	r := algos.Request{Cost: 1}
	b.Run("serial", func(b *testing.B) {
		s := New(Options{MaxEntries: 1_000_000})
		for b.Loop() {
			s.Decide(keys[0], g, r)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		s := New(Options{MaxEntries: 1_000_000})
		var seq atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			i := int(seq.Add(7919))
			for pb.Next() {
				s.Decide(keys[i%len(keys)], g, r)
				i++
			}
		})
	})
}
