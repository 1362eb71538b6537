// Package gcfloor lets a process's heap grow by at least a floor between garbage collections.
//
// Go's collector runs once the heap has grown by GOGC percent (100) of what is live, and at
// 4 MB at least. A daemon that keeps little (a few megabytes) but allocates for every request
// then collects many times a second, and each collection costs it CPU: its marking, and the
// goroutine stacks it shrinks that grow again on the next request. Keep moves GOGC after each
// collection so that the next one comes when the heap has grown by the floor or by what GOGC's
// default would let it grow, whichever is more: the most it adds to the heap is the floor, and a
// process that keeps more than the floor is collected as Go's default collects it.
package gcfloor

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// Keep keeps the floor (bytes) from now on, until stop is called. It does nothing when the
// environment sets GOGC: the operator's choice stands. GOMEMLIMIT bounds the heap as ever.
func Keep(floor uint64) (stop func()) {
	if os.Getenv("GOGC") != "" {
		return func() {}
	}
	k := &keeper{floor: floor}
	k.tune()
	k.arm()
	return func() {
		k.mu.Lock()
		defer k.mu.Unlock()
		k.stopped = true
		debug.SetGCPercent(100)
	}
}

type keeper struct {
	floor   uint64
	mu      sync.Mutex
	stopped bool
	base    []metrics.Sample
}

// arm has tune run after the next collection: the cleanup of an object that only the collector
// sees go (16 bytes: smaller ones may share a block that lives on). It then arms itself again.
func (k *keeper) arm() {
	runtime.AddCleanup(new([16]byte), func(k *keeper) {
		if k.tune() {
			k.arm()
		}
	}, k)
}

// tune sets GOGC from what the last collection found, unless k has stopped.
func (k *keeper) tune() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stopped {
		return false
	}
	if k.base == nil {
		k.base = []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/scan/stack:bytes"}, {Name: "/gc/scan/globals:bytes"}}
	}
	metrics.Read(k.base)
	live := k.base[0].Value.Uint64()
	debug.SetGCPercent(percent(live, live+k.base[1].Value.Uint64()+k.base[2].Value.Uint64(), k.floor))
	return true
}

// minHeap is Go's least heap goal at GOGC 100, which scales with GOGC (the GC guide's "minimum
// total heap size").
const minHeap = 4 << 20

// percent is the GOGC under which a heap of live bytes grows by floor before its next
// collection, base being what GOGC is a percentage of (the live heap, the goroutine stacks and
// the globals): the heap's goal is then live + floor, the larger of live + base × GOGC/100 and
// minHeap × GOGC/100. But never below GOGC 100, Go's default, nor above 2^30 percent.
func percent(live, base, floor uint64) int {
	p := min(float64(floor)/float64(max(base, 1)), (float64(live)+float64(floor))/minHeap) * 100
	return int(min(max(p, 100), 1<<30))
}
