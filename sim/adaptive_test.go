package sim

import (
	"testing"

	"github.com/diana-gw/diana/shared/algos"
)

// TestAdaptiveTargets is the study of docs/adaptive.md on 2 seeds instead of 8 (virtual time,
// deterministic): Diana's adaptive limit must meet the targets, at 3× overload a P99 of admitted
// requests within 2× unloaded and goodput ≥ 90% of capacity, and after the servers halve
// convergence within 5 s; and beat Netflix's Gradient2 on convergence and P99 and Vegas on goodput.
func TestAdaptiveTargets(t *testing.T) {
	const seeds = 2
	u99 := UnloadedP99()
	ours := Measure("diana", dianaAdaptive, seeds, u99)
	g2 := Measure("gradient2", gradient2, seeds, u99)
	vg := Measure("vegas", vegas, seeds, u99)
	none := Measure("none", func(uint64) AdLimiter { return NoLimit{} }, 1, u99)
	for _, r := range []AdaptiveRow{ours, g2, vg, none} {
		t.Logf("%s: knee %.2f %d µs; halving %.2f %d µs, %d µs; slowing %.2f %d µs, %d µs", r.Name, r.Goodput, r.P99,
			r.GoodputHalved, r.P99Halved, r.Converge, r.GoodputSlowed, r.P99Slowed, r.ConvergeSlow)
	}
	if ours.P99 > 2*u99 || ours.P99Halved > 2*u99 {
		t.Errorf("P99 at 3× overload %d µs, %d µs after the halving: over 2× unloaded (%d µs)", ours.P99, ours.P99Halved, 2*u99)
	}
	if ours.Goodput < 0.9 || ours.GoodputHalved < 0.9 {
		t.Errorf("goodput %.2f, %.2f after the halving: want ≥ 0.9 of capacity", ours.Goodput, ours.GoodputHalved)
	}
	if ours.Converge < 0 || ours.Converge > 5*algos.Second || g2.Converge >= 0 && ours.Converge > g2.Converge {
		t.Errorf("converged %d µs after the halving (Gradient2: %d): want within 5 s and no later", ours.Converge, g2.Converge)
	}
	if ours.P99 > g2.P99 || ours.P99Halved > g2.P99Halved || ours.P99Slowed > g2.P99Slowed {
		t.Errorf("P99 %d, %d, %d µs (knee, halving, slowing); Gradient2 %d, %d, %d", ours.P99, ours.P99Halved, ours.P99Slowed, g2.P99, g2.P99Halved, g2.P99Slowed)
	}
	if ours.Goodput < vg.Goodput || ours.Goodput < g2.Goodput-0.01 {
		t.Errorf("goodput %.2f; Gradient2 %.2f, Vegas %.2f", ours.Goodput, g2.Goodput, vg.Goodput)
	}
	// On a backend that sheds load with fast 503s, the drops hold the limit (and the goodput)
	// where the latency alone would let it grow.
	shed, blind := MeasureShed("diana", dianaAdaptive, seeds), MeasureShed("latency only", latencyOnly, seeds)
	t.Logf("shedding: diana %+v; latency only %+v", shed, blind)
	if shed.Goodput < 0.9 || blind.Goodput > 0.9*shed.Goodput {
		t.Errorf("shedding backend: goodput %.2f, %.2f with the latency only: want ≥ 0.9, and the latency alone to lose", shed.Goodput, blind.Goodput)
	}
	// The harness can fail: with no limit the P99 runs away and never converges.
	if none.P99 <= 2*u99 || none.Converge >= 0 {
		t.Errorf("no limit: P99 %d µs, converged %d: the harness does not load the backend", none.P99, none.Converge)
	}
}
