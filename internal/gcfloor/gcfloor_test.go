package gcfloor

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
)

func TestPercent(t *testing.T) {
	for _, c := range []struct {
		live, base, floor uint64
		want              int
	}{
		{2 << 20, 3 << 20, 64 << 20, 1650},  // goal: 4 MiB × 16.5 = 66 MiB
		{16 << 20, 20 << 20, 64 << 20, 320}, // goal: 16 MiB + 20 MiB × 3.2 = 80 MiB
		{64 << 20, 70 << 20, 64 << 20, 100}, // GOGC 100 lets it grow by more than the floor
		{200 << 20, 210 << 20, 64 << 20, 100},
		{0, 0, 64 << 20, 1600},
		{1, 1, 1 << 62, 1 << 30},
		{1 << 20, 1 << 20, 0, 100},
	} {
		if got := percent(c.live, c.base, c.floor); got != c.want {
			t.Errorf("percent(%d, %d, %d) = %d, want %d", c.live, c.base, c.floor, got, c.want)
		}
	}
}

// TestKeep allocates 512 MiB of garbage in 4 KiB pieces, keeping 1 MiB live, and counts the
// collections: with a floor of 64 MiB about 8, without it one per few MiB.
func TestKeep(t *testing.T) {
	t.Setenv("GOGC", "")
	without := collections()
	stop := Keep(64 << 20)
	with := collections()
	runtime.GC()
	goal := read("/gc/heap/goal:bytes")
	stop()
	if gogc() != 100 {
		t.Errorf("after stop, GOGC is %d, want 100", gogc())
	}
	t.Logf("collections: %d with a floor of 64 MiB, %d without", with, without)
	if with < 6 || with > 12 || without < 4*with {
		t.Errorf("collections: %d with a floor of 64 MiB, %d without", with, without)
	}
	if live := read("/gc/heap/live:bytes"); goal > live+66<<20 {
		t.Errorf("with a floor of 64 MiB, the heap's goal is %d bytes, %d above its live heap", goal, goal-live)
	}
}

// TestKeepEnv: GOGC set in the environment stands.
func TestKeepEnv(t *testing.T) {
	t.Setenv("GOGC", "100")
	stop := Keep(64 << 20)
	defer stop()
	runtime.GC()
	runtime.GC()
	if gogc() != 100 {
		t.Errorf("with GOGC=100 in the environment, GOGC is %d", gogc())
	}
}

var sink []byte

func collections() uint64 {
	live := make([][]byte, 256)
	for i := range live {
		live[i] = make([]byte, 4<<10)
	}
	runtime.GC()
	before := cycles()
	for i := 0; i < 512<<20/(4<<10); i++ {
		sink = make([]byte, 4<<10)
	}
	runtime.KeepAlive(live)
	return cycles() - before
}

func cycles() uint64 { return read("/gc/cycles/total:gc-cycles") }

func read(name string) uint64 {
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func gogc() int {
	p := debug.SetGCPercent(-1)
	debug.SetGCPercent(p)
	return p
}
