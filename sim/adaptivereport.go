package sim

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/conf"
	"github.com/diana-gw/diana/shared/rules"
)

// The adaptive study: the limiters of adaptive.go on two backends, both under offered load ramping
// from 0.5× to 3× capacity over 10 s, then held at 3× until 30 s. "knee": 16 servers throughout;
// "halving": the servers halve at 20 s. Figures are measured on the runs, never set.

// AdaptiveRow is one limiter's figures.
type AdaptiveRow struct {
	Name string
	// On the knee backend, at 3× overload (12 s to 20 s): goodput as a share of capacity, and
	// the P99 latency of admitted requests (µs).
	Goodput float64
	P99     int64
	// On the halving backend: goodput (share of the halved capacity) and P99 from 25 s to 30 s,
	// and how long after the halving the P99 over 500 ms windows stays within 2× unloaded
	// (µs; -1: never).
	GoodputHalved float64
	P99Halved     int64
	Converge      int64
	// The same on the slowing backend (its unloaded P99 doubles: the bound too).
	GoodputSlowed float64
	P99Slowed     int64
	ConvergeSlow  int64
	knee, halving AdRun
}

// ShedRow is one limiter's figures on the shedding backend at 3× overload (12 s to 20 s):
// goodput (requests served, not 503s) as a share of capacity, the P99 of those served (µs), and
// the share of the backend's answers that were 503s.
type ShedRow struct {
	Name    string
	Goodput float64
	P99     int64
	Shed    float64
}

// AdaptiveStudy is the study's outcome.
type AdaptiveStudy struct {
	Capacity    float64 // requests per second before halving
	UnloadedP99 int64   // µs, the P99 at 0.1× load with no limit
	BestStatic  int64
	Seeds       int // runs per limiter and backend
	Rows        []AdaptiveRow
	Shed        []ShedRow
	Checks      []CheckRow
}

// CheckRow is a limiter's figures in a setting the defaults were not chosen on: other seeds,
// other server counts.
type CheckRow struct {
	Setting string
	AdaptiveRow
}

const (
	adEnd     = 30 * algos.Second
	adHalveAt = 20 * algos.Second
)

// DianaAdaptive is Diana's adaptive limit with the defaults of its registry entry.
func DianaAdaptive() *algos.Adaptive {
	k, _ := rules.Algorithm("adaptive")
	a, err := k.Build(k.Example(), 1)
	if err != nil {
		panic(err)
	}
	return a.(*algos.Adaptive)
}

// adaptiveDefaults lists the registry's defaults of adaptive, for the report.
func adaptiveDefaults() string {
	k, _ := rules.Algorithm("adaptive")
	ex := k.Example()
	var out []string
	for _, p := range k.Params {
		v := strconv.FormatInt(ex[p.Name], 10)
		if p.Type == rules.Duration {
			v = conf.FormatDuration(ex[p.Name])
		}
		out = append(out, p.Name+" "+v)
	}
	return strings.Join(out, ", ")
}

// The study's setting: the backend, the load and the unloaded P99 it is judged against. The
// shedding backend refuses a request that would be the 3rd to wait, with a 503 that takes a
// server 2 ms.
var (
	adBackend  = AdBackend{Servers: 16, ServiceUs: 5 * algos.Millisecond}
	adShedding = AdBackend{Servers: 16, ServiceUs: 5 * algos.Millisecond, ShedQueue: 2, ShedUs: 2 * algos.Millisecond}
	adLoad     = AdLoad{From: 0.5, To: 3, RampUs: 10 * algos.Second}
)

// UnloadedP99 is the backend's P99 at 0.1× load with no limit, µs.
func UnloadedP99() int64 { return unloadedP99(adBackend) }

func unloadedP99(b AdBackend) int64 {
	un := AdSimulate(b, AdLoad{From: 0.1, To: 0.1}, NoLimit{}, 20*algos.Second, 1)
	_, u99 := un.Window(0, 20*algos.Second)
	return u99
}

// Measure runs the limiters mk makes (a fresh one per run) on the three backends, once per
// seed, and returns the means of goodput and P99 and the longest convergence (-1 if a run never
// converged); the runs of the first seed are kept for the charts.
func Measure(name string, mk func(seed uint64) AdLimiter, seeds int, u99 int64) AdaptiveRow {
	return measureOn(adBackend, name, mk, 1, uint64(seeds), u99)
}

// measureOn is Measure on backend b (halving and slowing as the study's) with the seeds first
// to last.
func measureOn(b AdBackend, name string, mk func(seed uint64) AdLimiter, first, last uint64, u99 int64) AdaptiveRow {
	row := AdaptiveRow{Name: name}
	halving, slowing := b, b
	halving.HalveAt, slowing.SlowAt = adHalveAt, adHalveAt
	seeds := int(last - first + 1)
	c, n := b.Capacity(), float64(seeds)
	worst := func(a, b int64) int64 {
		if a < 0 || b < 0 {
			return -1
		}
		return max(a, b)
	}
	for seed := first; seed <= last; seed++ {
		knee := AdSimulate(b, adLoad, mk(seed), adHalveAt, seed)
		g, p := knee.Window(12*algos.Second, adHalveAt)
		row.Goodput += g / c / n
		row.P99 += p / int64(seeds)
		h := AdSimulate(halving, adLoad, mk(seed), adEnd, seed)
		g, p = h.Window(25*algos.Second, adEnd)
		row.GoodputHalved += 2 * g / c / n
		row.P99Halved += p / int64(seeds)
		row.Converge = worst(row.Converge, h.Converged(adHalveAt, adEnd, 2*u99))
		sl := AdSimulate(slowing, adLoad, mk(seed), adEnd, seed)
		g, p = sl.Window(25*algos.Second, adEnd)
		row.GoodputSlowed += 2 * g / c / n
		row.P99Slowed += p / int64(seeds)
		row.ConvergeSlow = worst(row.ConvergeSlow, sl.Converged(adHalveAt, adEnd, 4*u99))
		if seed == first {
			row.knee, row.halving = knee, h
		}
	}
	return row
}

// MeasureShed runs the limiters mk makes on the shedding backend, once per seed, and returns the
// means.
func MeasureShed(name string, mk func(seed uint64) AdLimiter, seeds int) ShedRow {
	row := ShedRow{Name: name}
	n := float64(seeds)
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		r := AdSimulate(adShedding, adLoad, mk(seed), adHalveAt, seed)
		g, p := r.Window(12*algos.Second, adHalveAt)
		row.Goodput += g / adShedding.Capacity() / n
		row.P99 += p / int64(seeds)
		row.Shed += r.Shed(12*algos.Second, adHalveAt) / n
	}
	return row
}

// The limiters of the study, each made afresh for a run.
func gradient2(uint64) AdLimiter        { return &Gradient2{MinLimit: 4, MaxLimit: 1000} }
func vegas(seed uint64) AdLimiter       { return &Vegas{MaxLimit: 1000, Seed: seed} }
func dianaAdaptive(uint64) AdLimiter    { return &Adaptive{Alg: DianaAdaptive()} }
func latencyOnly(seed uint64) AdLimiter { return LatencyOnly{dianaAdaptive(seed)} }

// RunAdaptiveStudy runs every limiter on the three backends with seeds seeds.
func RunAdaptiveStudy(seeds int) AdaptiveStudy {
	u99 := UnloadedP99()
	s := AdaptiveStudy{Capacity: adBackend.Capacity(), UnloadedP99: u99, Seeds: seeds}
	// The best static limit: the most goodput on the knee backend with its P99 within 2× unloaded
	// (seed 1).
	best, bestGood := int64(0), 0.0
	for l := int64(4); l <= 64; l += 2 {
		r := AdSimulate(adBackend, adLoad, &Static{Max: l}, adHalveAt, 1)
		g, p := r.Window(12*algos.Second, adHalveAt)
		if p <= 2*u99 && g > bestGood {
			best, bestGood = l, g
		}
	}
	s.BestStatic = best
	none := func(uint64) AdLimiter { return NoLimit{} }
	static := func(uint64) AdLimiter { return &Static{Max: best} }
	// The limiters compared, each named once: the anchors and Diana's are also checked in the
	// other settings.
	type limiter struct {
		name string
		mk   func(uint64) AdLimiter
	}
	compared := []limiter{{"Gradient2 (Netflix)", gradient2}, {"Vegas (Netflix)", vegas}, {"diana adaptive", dianaAdaptive}}
	all := append([]limiter{{"no limit", none}, {"static " + strconv.FormatInt(best, 10), static}}, compared...)
	for _, l := range all {
		s.Rows = append(s.Rows, Measure(l.name, l.mk, seeds, u99))
		s.Shed = append(s.Shed, MeasureShed(l.name, l.mk, seeds))
	}
	s.Shed = append(s.Shed, MeasureShed("diana adaptive, latency only (503s not reported as drops)", latencyOnly, seeds))
	for _, c := range []struct {
		servers     int
		first, last uint64
	}{{16, 9, 24}, {32, 1, 8}, {8, 1, 8}} {
		b := adBackend
		b.Servers = c.servers
		u := unloadedP99(b)
		setting := fmt.Sprintf("%d servers, seeds %d to %d", c.servers, c.first, c.last)
		for _, l := range compared {
			s.Checks = append(s.Checks, CheckRow{setting, measureOn(b, l.name, l.mk, c.first, c.last, u)})
		}
	}
	return s
}

// Markdown writes docs/adaptive.md.
func (s AdaptiveStudy) Markdown() string {
	var b strings.Builder
	ms := func(us int64) string { return fmt.Sprintf("%.1f ms", float64(us)/1000) }
	fmt.Fprintf(&b, `# Adaptive limiting: the simulation

Generated by `+"`make report-adaptive`"+` (cmd/adaptivesim, sim/adaptive.go): do not edit. Every figure
below is measured on deterministic runs in virtual time (seeded), which take seconds: goodput and
P99 are the means of %d runs (seeds 1 to %d), a convergence time the longest of them; the charts
show seed 1.

**Backends.** %d servers with a FIFO queue, service time 5 ms + an exponential of mean 5 ms
(capacity %.0f requests/s; unloaded P99 %s, measured at 0.1× load with no limit). *knee*: as is;
*halving*: the servers halve at 20 s (capacity %.0f/s); *slowing*: every service takes twice as
long from 20 s (capacity halved too, and the unloaded latency doubled: a baseline measured
before is stale). **Load**: Poisson arrivals from 0.5× to 3×
the original capacity over 10 s, then 3× until 30 s (the knee backend's runs end at 20 s). A
request refused by the limiter is gone.

**Limiters.** No limit; the best static limit (%d: the most goodput on *knee* with P99 within 2×
unloaded, of 4, 6, .., 64, seed 1); Netflix concurrency-limits' Gradient2Limit and VegasLimit re-implemented from
their source with their defaults (per-sample updates; min and max limit as ours); Diana's
`+"`adaptive`"+` with its defaults (%s).

Targets: P99 of admitted ≤ 2× unloaded (%s) at 3× overload, goodput ≥ 90%% of capacity,
converged within 5 s after the capacity halves.

| limiter | knee: goodput at 3× | knee: P99 at 3× | halving: goodput after | halving: P99 after | halving: converged | slowing: goodput after | slowing: P99 after | slowing: converged |
| --- | --- | --- | --- | --- | --- | --- | --- | --- |
`, s.Seeds, s.Seeds, 16, s.Capacity, ms(s.UnloadedP99), s.Capacity/2, s.BestStatic, adaptiveDefaults(), ms(2*s.UnloadedP99))
	conv := func(us int64) string {
		if us < 0 {
			return "never"
		}
		return fmt.Sprintf("%.1f s", float64(us)/1e6)
	}
	row := func(first string, r AdaptiveRow) {
		fmt.Fprintf(&b, "| %s | %.0f%% | %s | %.0f%% | %s | %s | %.0f%% | %s | %s |\n", first, 100*r.Goodput, ms(r.P99),
			100*r.GoodputHalved, ms(r.P99Halved), conv(r.Converge), 100*r.GoodputSlowed, ms(r.P99Slowed), conv(r.ConvergeSlow))
	}
	for _, r := range s.Rows {
		row(r.Name, r)
	}
	fmt.Fprintf(&b, `
Goodput is requests completed per second, as a share of the capacity (after 20 s: of the halved
capacity), from 12 s to 20 s (knee) and from 25 s to 30 s (halving, slowing). Converged: how long
after 20 s every 500 ms window's P99 is within 2× unloaded until the end (slowing: 2× the new
unloaded P99, 4× the old).

**Drops.** A backend that sheds load answers fast: its failures look like good latency to a
controller that sees only latency, so the limit grows while the backend sheds. *shedding*: the
knee backend, but a request that would be the %d%s to wait is refused with a 503 that takes a
server %s, ahead of the queue (it is read and answered: fast, not free). Same load; figures from
12 s to 20 s. Diana's front ends report a 5xx as a drop (Request.Dropped), which cuts the limit
by `+"`backoff`"+`; Gradient2 takes a drop as any other sample, as the original does; Vegas cuts by
log10 on one (didDrop). Goodput counts requests served, not 503s; 503s are their share of the
backend's answers.

| limiter | shedding: goodput at 3× | shedding: P99 of served | shedding: 503s |
| --- | --- | --- | --- |
`, adShedding.ShedQueue+1, ordinal(adShedding.ShedQueue+1), ms(adShedding.ShedUs))
	for _, r := range s.Shed {
		fmt.Fprintf(&b, "| %s | %.0f%% | %s | %.0f%% |\n", r.Name, 100*r.Goodput, ms(r.P99), 100*r.Shed)
	}
	b.WriteString(`
**Other settings.** The defaults were chosen on the runs above; the same study on seeds they
were not chosen on, and on backends of 32 and 8 servers (capacity and unloaded P99 as measured
for each; 8 servers halve to 4, ` + "`min_limit`" + `). The defaults hold the median within 8% of
the unloaded one, which allows a queue of about one request per 15 servers: the fewer the
servers, the closer the limit keeps to them, and the more often a server waits idle for a
request (goodput given up for latency, where Gradient2's fixed queue allowance does the
opposite).

| setting, limiter | knee: goodput at 3× | knee: P99 at 3× | halving: goodput after | halving: P99 after | halving: converged | slowing: goodput after | slowing: P99 after | slowing: converged |
| --- | --- | --- | --- | --- | --- | --- | --- | --- |
`)
	for _, r := range s.Checks {
		row(r.Setting+": "+r.Name, r.AdaptiveRow)
	}
	b.WriteString(`
![the limit over time on the halving backend](img/adaptive-limit.svg)

![P99 of admitted requests per 100 ms on the halving backend](img/adaptive-p99.svg)
`)
	return b.String()
}

// ordinal is the English suffix of n: st, nd, rd or th.
func ordinal(n int) string {
	switch {
	case n%100/10 == 1:
		return "th"
	case n%10 == 1:
		return "st"
	case n%10 == 2:
		return "nd"
	case n%10 == 3:
		return "rd"
	}
	return "th"
}

// LimitSVG charts each limiter's limit over time on the halving backend.
func (s AdaptiveStudy) LimitSVG() []byte {
	return s.chart("limit over time (halving backend)", "limit", func(r *AdaptiveRow) []float64 {
		out := make([]float64, len(r.halving.Limits))
		for i, v := range r.halving.Limits {
			out[i] = float64(v)
		}
		return out
	}, true)
}

// P99SVG charts each limiter's P99 per 100 ms on the halving backend, capped at 8× unloaded.
func (s AdaptiveStudy) P99SVG() []byte {
	top := float64(8*s.UnloadedP99) / 1000
	return s.chart("P99 of admitted requests, ms (halving backend; capped at 8× unloaded)", "ms", func(r *AdaptiveRow) []float64 {
		out := make([]float64, len(r.halving.P99))
		for i, v := range r.halving.P99 {
			out[i] = min(float64(v)/1000, top)
		}
		return out
	}, false)
}

func (s AdaptiveStudy) chart(title, unit string, series func(*AdaptiveRow) []float64, skipNone bool) []byte {
	const w, h, left, right, top, bottom = 760.0, 340.0, 60.0, 200.0, 30.0, 40.0
	g := newSVG(int(w), int(h))
	g.text(w/2, 18, "middle", 13, "bold", 0, title)
	hi := 0.0
	for i := range s.Rows {
		for _, v := range series(&s.Rows[i]) {
			hi = max(hi, v)
		}
	}
	hi = niceMax(hi, 5)
	pw, ph := w-left-right, h-top-bottom
	g.frame(left, top, pw, ph, "#999")
	for _, t := range ticks(0, hi, 5) {
		y := top + ph - ph*t/hi
		g.line(left, y, left+pw, y, "#eee", 1, "")
		g.text(left-5, y+4, "end", 10, "", 0, fmtTick(t))
	}
	for sec := 0; sec <= 30; sec += 5 {
		x := left + pw*float64(sec)/30
		g.text(x, h-bottom+15, "middle", 10, "", 0, fmt.Sprintf("%d s", sec))
	}
	x := left + pw*float64(adHalveAt)/float64(adEnd)
	g.line(x, top, x, top+ph, "#c00", 1, "4,3")
	g.text(left-45, top+ph/2, "middle", 10, "", -90, unit)
	for i := range s.Rows {
		r := &s.Rows[i]
		if skipNone && r.Name == "no limit" {
			continue
		}
		v := series(r)
		xs, ys := make([]float64, len(v)), make([]float64, len(v))
		for j := range v {
			xs[j] = left + pw*float64(j)/float64(len(v))
			ys[j] = top + ph - ph*v[j]/hi
		}
		g.polyline(xs, ys, colour(i), 1.5, "")
		g.text(left+pw+10, top+15+float64(i)*16, "start", 11, "", 0, r.Name)
		g.line(left+pw+150, top+11+float64(i)*16, left+pw+185, top+11+float64(i)*16, colour(i), 2, "")
	}
	return g.bytes()
}
