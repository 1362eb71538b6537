package sim

import (
	"testing"

	"github.com/diana-gw/diana/shared/algos"
)

// TestAdaptiveTargets runs Diana's adaptive limit and the Netflix anchors on the study's two
// backends (virtual time, deterministic) and checks the targets: at 3× overload, the P99 of
// admitted requests within 2× unloaded and goodput ≥ 90% of capacity; after the capacity halves,
// converged within 5 s and no later than Gradient2; goodput no worse than the anchors'.
func TestAdaptiveTargets(t *testing.T) {
	b := AdBackend{Servers: 16, ServiceUs: 5 * algos.Millisecond}
	load := AdLoad{From: 0.5, To: 3, RampUs: 10 * algos.Second}
	un := AdSimulate(b, AdLoad{From: 0.1, To: 0.1}, NoLimit{}, 20*algos.Second, 1)
	_, u99 := un.Window(0, 20*algos.Second)
	halving := b
	halving.HalveAt = adHalveAt
	type figures struct {
		good, goodHalved float64
		p99              int64
		converge         int64
	}
	run := func(mk func() AdLimiter) figures {
		k := AdSimulate(b, load, mk(), adHalveAt, 2)
		g, p := k.Window(12*algos.Second, adHalveAt)
		h := AdSimulate(halving, load, mk(), adEnd, 2)
		gh, _ := h.Window(25*algos.Second, adEnd)
		return figures{g / b.Capacity(), gh / (b.Capacity() / 2), p, h.Converged(adHalveAt, adEnd, 2*u99)}
	}
	ours := run(func() AdLimiter { return &Adaptive{Alg: DianaAdaptive()} })
	g2 := run(func() AdLimiter { return &Gradient2{MinLimit: 4, MaxLimit: 1000} })
	vegas := run(func() AdLimiter { return &Vegas{MaxLimit: 1000, Seed: 3} })
	none := run(func() AdLimiter { return NoLimit{} })
	t.Logf("unloaded P99 %d µs; ours %+v; Gradient2 %+v; Vegas %+v; none %+v", u99, ours, g2, vegas, none)
	if ours.p99 > 2*u99 {
		t.Errorf("P99 at 3× overload %d µs, over 2× unloaded (%d µs)", ours.p99, 2*u99)
	}
	if ours.good < 0.9 || ours.goodHalved < 0.9 {
		t.Errorf("goodput %.2f, %.2f after halving: want ≥ 0.9 of capacity", ours.good, ours.goodHalved)
	}
	if ours.converge < 0 || ours.converge > 5*algos.Second || g2.converge >= 0 && ours.converge > g2.converge {
		t.Errorf("converged %d µs after the halving (Gradient2: %d): want within 5 s and no later", ours.converge, g2.converge)
	}
	if ours.good < vegas.good || ours.good < g2.good-0.01 {
		t.Errorf("goodput %.2f, Gradient2 %.2f, Vegas %.2f", ours.good, g2.good, vegas.good)
	}
	// The harness can fail: with no limit the P99 runs away and never converges.
	if none.p99 <= 2*u99 || none.converge >= 0 {
		t.Errorf("no limit: P99 %d µs, converged %d: the harness does not load the backend", none.p99, none.converge)
	}
}
