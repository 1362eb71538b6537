package memstore

import (
	"runtime"
	"strconv"
	"testing"

	"github.com/diana-gw/diana/shared/algos"
)

// entryBytes bounds the heap one entry costs, for the keys of clientKey (at most 32 bytes):
// measured 159 bytes at the default bound (Go 1.26, amd64): the entry (its algos.State, expiry,
// key header and chain link, 96 bytes), the key string (24 or 32) and the map's slot (the key's
// hash and a pointer) with its share of the table's free room (the rest). The bound leaves half
// as much again.
const entryBytes = 256

// clientKey appends the key a per-IP rule gives the i-th distinct client, as rules builds keys
// ("NAME|ADDRESS"): IPv4 addresses, and every fourth one an IPv6 /64.
func clientKey(dst []byte, i int) []byte {
	dst = append(dst[:0], "per-ip|"...)
	if i%4 == 3 {
		dst = append(dst, "2001:db8:"...)
		dst = strconv.AppendUint(dst, uint64(i>>16&0xffff), 16)
		dst = append(dst, ':')
		dst = strconv.AppendUint(dst, uint64(i&0xffff), 16)
		return append(dst, "::/64"...)
	}
	for shift := 24; shift >= 0; shift -= 8 {
		dst = strconv.AppendUint(dst, uint64(i>>shift&255), 10)
		if shift > 0 {
			dst = append(dst, '.')
		}
	}
	return dst
}

func heapAlloc() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestMillionClients: a million distinct clients, each deciding once, never make the store hold
// more than MaxEntries entries, nor more heap than MaxEntries × entryBytes; the store still
// fills up to close to its bound (keys spread unevenly over the shards).
func TestMillionClients(t *testing.T) {
	const clients = 1_000_000
	for _, tc := range []struct {
		name       string
		maxEntries int // 0: the default
		bound      int
	}{
		{"bound 1000000", 1_000_000, 1_000_000},
		{"default bound", 0, DefaultMaxEntries},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := heapAlloc()
			s, _ := newStore(tc.maxEntries) // the clock stands still: no entry expires
			g := gcra(t, 10, algos.Second, 10)
			buf := make([]byte, 0, 32)
			for i := range clients {
				buf = clientKey(buf, i)
				if len(buf) > 32 {
					t.Fatalf("key %q is longer than entryBytes assumes", buf)
				}
				if d := s.Decide(string(buf), g, algos.Request{Cost: 1}); !d.Allowed {
					t.Fatalf("client %d (%s) denied on its first request: %+v", i, buf, d)
				}
				if i%100_000 == 0 {
					if n := s.Len(); n > tc.bound {
						t.Fatalf("after %d clients the store holds %d entries, bound %d", i+1, n, tc.bound)
					}
				}
			}
			n := s.Len()
			if n > tc.bound || n < tc.bound*95/100 {
				t.Fatalf("the store holds %d entries, want at most %d and at least 95%% of it", n, tc.bound)
			}
			heap := int64(heapAlloc()) - int64(base)
			limit := int64(tc.bound) * entryBytes
			t.Logf("%d entries, %d bytes of heap: %.0f bytes per entry", n, heap, float64(heap)/float64(n))
			if heap > limit {
				t.Fatalf("%d entries take %d bytes of heap, more than %d × %d = %d", n, heap, tc.bound, entryBytes, limit)
			}
			runtime.KeepAlive(s)
		})
	}
}

// TestSmallBounds: the shards' shares add up to MaxEntries exactly, and a bound under 64 is
// raised to 64, one entry per shard.
func TestSmallBounds(t *testing.T) {
	for _, tc := range []struct{ maxEntries, bound int }{
		{1, 64}, {63, 64}, {64, 64}, {65, 65}, {100, 100}, {6401, 6401},
	} {
		s, _ := newStore(tc.maxEntries)
		total := 0
		for i := range s.shards {
			total += s.shards[i].max
		}
		if total != tc.bound {
			t.Errorf("MaxEntries %d: the shards hold %d entries in all, want %d", tc.maxEntries, total, tc.bound)
		}
		g := gcra(t, 1, algos.Second, 1)
		buf := make([]byte, 0, 32)
		for i := range 20 * tc.bound {
			buf = clientKey(buf, i)
			s.Decide(string(buf), g, algos.Request{Cost: 1})
		}
		if n := s.Len(); n > tc.bound {
			t.Errorf("MaxEntries %d: the store holds %d entries, bound %d", tc.maxEntries, n, tc.bound)
		}
	}
}

// BenchmarkNewClient decides once for each of b.N distinct clients in a store large enough for
// all, and reports the heap each entry takes (B/entry).
func BenchmarkNewClient(b *testing.B) {
	base := heapAlloc()
	s, _ := newStore(b.N + 64)
	g := gcra(b, 10, algos.Second, 10)
	buf := make([]byte, 0, 32)
	b.ResetTimer()
	for i := range b.N {
		buf = clientKey(buf, i)
		s.Decide(string(buf), g, algos.Request{Cost: 1})
	}
	b.StopTimer()
	heap := int64(heapAlloc()) - int64(base)
	b.ReportMetric(float64(heap)/float64(s.Len()), "B/entry")
	runtime.KeepAlive(s)
}
