package sim

import (
	"fmt"

	"github.com/diana-gw/diana/shared/algos"
)

// replay decides evs in order through decide and reports which were admitted. With hold > 0
// (the concurrency limit) each request takes lease ID = its index + 1, and an admitted one
// gives it back hold µs after it arrived, on the same node, before any request arriving at
// that instant is decided.
func replay(evs []Event, hold int64, decide func(ev Event, r algos.Request) (bool, error)) ([]bool, error) {
	admitted := make([]bool, len(evs))
	var pending []int // admitted requests still in flight, in release order
	for i, ev := range evs {
		for hold > 0 && len(pending) > 0 && evs[pending[0]].At+hold <= ev.At {
			j := pending[0]
			pending = pending[1:]
			rel := evs[j]
			rel.At += hold
			if _, err := decide(rel, algos.Request{Now: rel.At, Release: true, ID: int64(j + 1)}); err != nil {
				return nil, err
			}
		}
		r := algos.Request{Now: ev.At, Cost: 1}
		if hold > 0 {
			r.ID = int64(i + 1)
		}
		ok, err := decide(ev, r)
		if err != nil {
			return nil, err
		}
		admitted[i] = ok
		if ok && hold > 0 {
			pending = append(pending, i)
		}
	}
	return admitted, nil
}

// exact replays evs through alg in one process, one state per client: the reference limiter
// that sees every request of a client in order.
func exact(evs []Event, hold int64, alg algos.Algorithm) ([]bool, error) {
	states := map[int32]*algos.State{}
	return replay(evs, hold, func(ev Event, r algos.Request) (bool, error) {
		st := states[ev.Key]
		if st == nil {
			st = &algos.State{}
			states[ev.Key] = st
		}
		return alg.Decide(st, r).Allowed, nil
	})
}

// Result holds the figures of one run: a trace replayed through one algorithm in one mode.
// Counts are requests (every request costs 1 unit).
type Result struct {
	Trace string `json:"trace"`
	Algo  string `json:"algorithm"`
	Mode  string `json:"mode"`
	// Skipped, when not empty, says why the mode does not run the algorithm; the figures are 0.
	Skipped string `json:"skipped,omitempty"`

	Offered  int64 `json:"offered"`  // requests in the trace
	Admitted int64 `json:"admitted"` // requests the nodes admitted
	// Ideal is what the algorithm's contract (Algo.Contract), deciding every request of each
	// client in order in one place, admits of the offered requests.
	Ideal int64 `json:"ideal"`
	// Over counts the admitted requests beyond the contract: replaying only the admitted
	// requests through the contract, those it denies. MaxExcess is the most of them in one
	// window of Algo.Window (aligned or sliding, as Algo.Aligned says) for one client; for the
	// concurrency limit, the most requests in flight beyond the limit at one instant.
	Over      int64 `json:"over"`
	MaxExcess int64 `json:"over_max"`
	// Under is the sum over clients of what the contract admits beyond what the nodes admitted
	// (ideal − admitted, where positive).
	Under int64 `json:"under"`
	// Peak is the most requests admitted for one client in any sliding window of Algo.Window
	// (the concurrency limit: the most in flight at once).
	Peak int64 `json:"peak"`
	// RedisCalls and RoundTrips count the script calls and the round trips to Redis (0 in local
	// modes).
	RedisCalls int64 `json:"redis_calls"`
	RoundTrips int64 `json:"redis_round_trips"`
	// Phases split the figures of a mode with an outage by when the requests came: before the
	// first outage, during one, after one (PhaseNames); the requests of each count in one.
	Phases []Phase `json:"phases,omitempty"`
}

// Phase is the part of a Result whose requests came in one phase of an outage. Over counts the
// admitted requests the contract denies (replayed over the whole trace) that came in the phase;
// Under sums over clients the contract's admissions in the phase beyond the nodes'.
type Phase struct {
	Name     string `json:"name"`
	Offered  int64  `json:"offered"`
	Admitted int64  `json:"admitted"`
	Ideal    int64  `json:"ideal"`
	Over     int64  `json:"over"`
	Under    int64  `json:"under"`
}

// OverPct and UnderPct are Over and Under as a percentage of Ideal.
func (p Phase) OverPct() float64  { return pct(p.Over, p.Ideal) }
func (p Phase) UnderPct() float64 { return pct(p.Under, p.Ideal) }

// The phases of an outage, indices into PhaseNames.
const (
	phaseBefore = iota
	phaseDuring
	phaseAfter
)

// PhaseNames name the phases of a Result with an outage: before the first outage, during one,
// and after one (until the next, if any).
var PhaseNames = [...]string{phaseBefore: "before", phaseDuring: "during", phaseAfter: "after"}

// phaseOf returns the phase of time at among outages ([from, to), sorted).
func phaseOf(at int64, outages [][2]int64) int {
	ph := phaseBefore
	for _, o := range outages {
		switch {
		case at < o[0]:
			return ph
		case at < o[1]:
			return phaseDuring
		}
		ph = phaseAfter
	}
	return ph
}

// phases splits r's figures by phaseOf: admitted and ideal flag t's events, over lists the
// admitted events the contract denies.
func phases(t *Trace, outages [][2]int64, admitted, ideal []bool, over []Event) []Phase {
	ps := make([]Phase, len(PhaseNames))
	adm := make([][]int64, len(PhaseNames)) // per phase, per client
	idl := make([][]int64, len(PhaseNames))
	for i := range ps {
		ps[i].Name = PhaseNames[i]
		adm[i], idl[i] = make([]int64, t.Keys), make([]int64, t.Keys)
	}
	for i, ev := range t.Events {
		ph := phaseOf(ev.At, outages)
		ps[ph].Offered++
		if admitted[i] {
			adm[ph][ev.Key]++
			ps[ph].Admitted++
		}
		if ideal[i] {
			idl[ph][ev.Key]++
			ps[ph].Ideal++
		}
	}
	for _, ev := range over {
		ps[phaseOf(ev.At, outages)].Over++
	}
	for i := range ps {
		for k := range adm[i] {
			ps[i].Under += max(0, idl[i][k]-adm[i][k])
		}
	}
	return ps
}

// OverPct and UnderPct are Over and Under as a percentage of Ideal.
func (r Result) OverPct() float64  { return pct(r.Over, r.Ideal) }
func (r Result) UnderPct() float64 { return pct(r.Under, r.Ideal) }

// CallsPerAdmitted is the number of Redis script calls per admitted request.
func (r Result) CallsPerAdmitted() float64 {
	if r.Admitted == 0 {
		return 0
	}
	return float64(r.RedisCalls) / float64(r.Admitted)
}

func pct(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

// measure fills the figures of r for trace t and algorithm a from which requests were admitted
// and which the contract admits of the offered ones (ideal).
func measure(r *Result, t *Trace, a Algo, outages [][2]int64, admitted, ideal []bool) error {
	contract, err := a.Contract()
	if err != nil {
		return fmt.Errorf("sim: %s: contract: %w", a.Name, err)
	}
	hold := int64(0)
	if a.InFlight {
		hold = t.Hold
	}
	perKey := func(flags []bool) []int64 {
		n := make([]int64, t.Keys)
		for i, ok := range flags {
			if ok {
				n[t.Events[i].Key]++
			}
		}
		return n
	}
	adm, idl := perKey(admitted), perKey(ideal)
	r.Offered = int64(len(t.Events))
	for k := range adm {
		r.Admitted += adm[k]
		r.Ideal += idl[k]
		r.Under += max(0, idl[k]-adm[k])
	}

	// The admitted requests, replayed through the contract: what it denies is over-admission.
	var in []Event
	for i, ok := range admitted {
		if ok {
			in = append(in, t.Events[i])
		}
	}
	conform, err := exact(in, hold, contract)
	if err != nil {
		return err
	}
	var over []Event
	for i, ok := range conform {
		if !ok {
			over = append(over, in[i])
		}
	}
	r.Over = int64(len(over))
	if outages != nil {
		r.Phases = phases(t, outages, admitted, ideal, over)
	}
	if a.InFlight {
		r.Peak = maxInFlight(in, hold)
		r.MaxExcess = max(0, r.Peak-contract.Script().Limit)
	} else {
		r.Peak = maxInWindow(in, a.Window, false)
		r.MaxExcess = maxInWindow(over, a.Window, a.Aligned)
	}
	return nil
}

// maxInWindow returns the most events of one client in a window of w µs: any half-open
// (t − w, t], or, aligned, any [k·w, (k+1)·w). evs is sorted by time.
func maxInWindow(evs []Event, w int64, aligned bool) int64 {
	byKey := map[int32][]int64{}
	for _, ev := range evs {
		byKey[ev.Key] = append(byKey[ev.Key], ev.At)
	}
	best := 0
	for _, ts := range byKey {
		lo := 0
		for hi, t := range ts {
			if aligned {
				for floorDiv(ts[lo], w) != floorDiv(t, w) {
					lo++
				}
			} else {
				for ts[lo] <= t-w {
					lo++
				}
			}
			best = max(best, hi-lo+1)
		}
	}
	return int64(best)
}

// maxInFlight returns the most admitted requests of one client in flight at once, each held
// hold µs from its arrival (a release at t comes before an arrival at t). evs is sorted by time.
func maxInFlight(evs []Event, hold int64) int64 {
	byKey := map[int32][]int64{}
	for _, ev := range evs {
		byKey[ev.Key] = append(byKey[ev.Key], ev.At)
	}
	best := 0
	for _, ts := range byKey {
		lo := 0 // the requests before lo have been released
		for hi, t := range ts {
			for ts[lo]+hold <= t {
				lo++
			}
			best = max(best, hi-lo+1)
		}
	}
	return int64(best)
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// Wrong counts the decisions of an estimate (Algo.Estimate: the weighted sliding window) on a
// trace that the exact sliding log of the same limit would have made differently, given the
// same history: each request is judged by both against the requests the estimate admitted
// before it, one state per client, in one place. A false allow is a request admitted that the
// log denies, a false deny one denied that it admits.
//
// Meter is Cloudflare's own measure, which counts every request of a client, admitted or not
// (its counter is not the limiter's): the requests for which the estimate over all of them and
// the exact count of them disagree on whether the client is over the limit.
type Wrong struct {
	Trace       string `json:"trace"`
	Algo        string `json:"algorithm"`
	Requests    int64  `json:"requests"`
	FalseAllows int64  `json:"false_allows"`
	FalseDenies int64  `json:"false_denies"`
	Meter       int64  `json:"meter_wrong"`
	// Bands splits the counts by the client's offered rate over the trace, relative to the
	// limit (Bands' bounds).
	Bands []Band `json:"bands"`
}

// Band is the share of Wrong of the clients whose offered rate over the trace, relative to the
// limit, is in [Lo, Hi) (in %; Hi 0: no upper bound).
type Band struct {
	Lo          int64 `json:"from_pct"`
	Hi          int64 `json:"below_pct"`
	Clients     int64 `json:"clients"`
	Requests    int64 `json:"requests"`
	FalseAllows int64 `json:"false_allows"`
	FalseDenies int64 `json:"false_denies"`
	Meter       int64 `json:"meter_wrong"`
}

// bands are the bounds of Wrong.Bands, in % of the limit: below 50%, 50 to 150%, 150% and above.
var bands = [][2]int64{{0, 50}, {50, 150}, {150, 0}}

// Name is the band as the report writes it: "< 50%", "50–150%", "≥ 150%".
func (b Band) Name() string {
	switch {
	case b.Lo == 0:
		return fmt.Sprintf("< %d%%", b.Hi)
	case b.Hi == 0:
		return fmt.Sprintf("≥ %d%%", b.Lo)
	}
	return fmt.Sprintf("%d–%d%%", b.Lo, b.Hi)
}

// Rate is the share of wrong decisions, in %.
func (w Wrong) Rate() float64 { return pct(w.FalseAllows+w.FalseDenies, w.Requests) }

// Rate is the share of wrong decisions of the band's requests, in %.
func (b Band) Rate() float64 { return pct(b.FalseAllows+b.FalseDenies, b.Requests) }

// MeterRate is the share of requests wrong by Cloudflare's measure (Wrong.Meter), in %.
func (w Wrong) MeterRate() float64 { return pct(w.Meter, w.Requests) }

// MeterRate is the share of the band's requests wrong by Cloudflare's measure, in %.
func (b Band) MeterRate() float64 { return pct(b.Meter, b.Requests) }

// wrongDecisions replays t through est (one state per client) and counts its decisions that
// differ from those of the exact sliding log of limit per window µs on the same history, and,
// with meter (est without a limit), the requests wrong by Cloudflare's measure.
func wrongDecisions(t *Trace, est, meter algos.Algorithm, limit, window int64) (Wrong, error) {
	if t.End <= t.Start {
		return Wrong{}, fmt.Errorf("sim: trace %s: empty span", t.Name)
	}
	// Each client's band, from its offered rate: requests per window over the trace, in % of
	// the limit.
	offered := make([]int64, t.Keys)
	for _, ev := range t.Events {
		offered[ev.Key]++
	}
	w := Wrong{Trace: t.Name, Requests: int64(len(t.Events))}
	for _, b := range bands {
		w.Bands = append(w.Bands, Band{Lo: b[0], Hi: b[1]})
	}
	band := make([]*Band, t.Keys)
	for k, n := range offered {
		p := 100 * float64(n) * float64(window) / float64(t.End-t.Start) / float64(limit)
		for i := range w.Bands {
			if b := &w.Bands[i]; p >= float64(b.Lo) && (b.Hi == 0 || p < float64(b.Hi)) {
				band[k] = b
			}
		}
		if n > 0 {
			band[k].Clients++
		}
	}

	states, meters := map[int32]*algos.State{}, map[int32]*algos.State{}
	logs := map[int32][]int64{} // per client: the times the estimate admitted, live ones last
	all := map[int32][]int64{}  // per client: the times of every request, live ones last
	for _, ev := range t.Events {
		st := states[ev.Key]
		if st == nil {
			st = &algos.State{}
			states[ev.Key] = st
		}
		allowed := est.Decide(st, algos.Request{Now: ev.At, Cost: 1}).Allowed
		log := logs[ev.Key]
		for len(log) > 0 && log[0] <= ev.At-window {
			log = log[1:]
		}
		exactAllows := int64(len(log))+1 <= limit
		b := band[ev.Key]
		b.Requests++
		switch {
		case allowed && !exactAllows:
			w.FalseAllows++
			b.FalseAllows++
		case !allowed && exactAllows:
			w.FalseDenies++
			b.FalseDenies++
		}
		if allowed {
			log = append(log, ev.At)
		}
		logs[ev.Key] = log

		// Cloudflare's measure: the estimate of every request (the meter's count before this
		// one, read by a dry run, plus one) against the exact count of every request.
		m := meters[ev.Key]
		if m == nil {
			m = &algos.State{}
			meters[ev.Key] = m
		}
		used := algos.MaxCount - meter.Decide(m, algos.Request{Now: ev.At, DryRun: true}).Remaining
		meter.Decide(m, algos.Request{Now: ev.At, Cost: 1})
		seen := append(all[ev.Key], ev.At)
		for seen[0] <= ev.At-window {
			seen = seen[1:]
		}
		all[ev.Key] = seen
		if (used+1 > limit) != (int64(len(seen)) > limit) {
			w.Meter++
			b.Meter++
		}
	}
	return w, nil
}
