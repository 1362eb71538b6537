package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strings"

	"github.com/diana-gw/diana/shared/algos"
)

// Event is one request of cost 1 in a trace.
type Event struct {
	At   int64 // µs of virtual time
	Key  int32 // the client: index into the trace's keys
	Node int32 // the gateway node that receives it, 0 ≤ Node < Trace.Nodes
}

// Trace is a sequence of requests, sorted by time, replayed in virtual time.
type Trace struct {
	Name  string
	About string // one line for the report
	Nodes int    // gateway nodes the requests are spread over
	Keys  int    // distinct clients
	Start int64  // µs: the first instant of the trace, a multiple of every window
	End   int64  // µs: the trace covers [Start, End)
	// Hold is how long an admitted request stays in flight (µs), for the concurrency limit: its
	// lease is released at At + Hold on the node that took it.
	Hold   int64
	Events []Event
	// Outages, if set, are when Redis cannot be reached in a mode with an outage (Mode.Outage),
	// as [from, to) in µs of virtual time, sorted and disjoint: the trace's own, instead of the
	// mode's fractions of its span.
	Outages [][2]int64
}

// Limit is the limit every algorithm of a run is configured with, stated once as a rate: Units
// per Window, per client. Each algorithm's parameters derive from it (see Algorithms), so that
// all of them admit about Units per Window under saturation.
type Limit struct {
	Units  int64 // per Window
	Window int64 // µs
}

// TraceOptions size the traces.
type TraceOptions struct {
	Seed  uint64
	Limit Limit
	// Length is the duration of each single-client trace in windows (default 10); the many-clients
	// trace is half as long.
	Length int64
	// Clients is the number of clients of the many-clients trace (default 10,000).
	Clients int
	// Load is the many-clients trace's total rate as a multiple of the limit (default 50).
	Load int64
	// ParetoClients is the number of clients of the pareto-clients trace (default 10,000).
	ParetoClients int
	// Nodes is the number of gateway nodes (default 4).
	Nodes int
}

func (o *TraceOptions) defaults() error {
	if o.Length == 0 {
		o.Length = 10
	}
	if o.Clients == 0 {
		o.Clients = 10_000
	}
	if o.Nodes == 0 {
		o.Nodes = 4
	}
	if o.ParetoClients == 0 {
		o.ParetoClients = 10_000
	}
	if o.Load == 0 {
		o.Load = 50
	}
	switch {
	case o.Limit.Units <= 0:
		return fmt.Errorf("sim: Limit.Units must be greater than 0, got %d", o.Limit.Units)
	case o.Limit.Window <= 0:
		return fmt.Errorf("sim: Limit.Window must be greater than 0 µs, got %d", o.Limit.Window)
	case o.Length < 2:
		return fmt.Errorf("sim: Length must be at least 2 windows, got %d", o.Length)
	case o.Clients < 2:
		return fmt.Errorf("sim: Clients must be at least 2, got %d", o.Clients)
	case o.ParetoClients < 1:
		return fmt.Errorf("sim: ParetoClients must be at least 1, got %d", o.ParetoClients)
	case o.Load < 1:
		return fmt.Errorf("sim: Load must be at least 1, got %d", o.Load)
	case o.Nodes < 1 || o.Nodes > 64:
		return fmt.Errorf("sim: Nodes must be between 1 and 64, got %d", o.Nodes)
	}
	return nil
}

// start is where every trace begins: one hour past the epoch, a multiple of any window that
// divides an hour, so that fixed windows start with the trace.
const start = algos.Hour

// Traces returns the standard traces, generated from o.Seed: the same options give the same
// traces.
//
//   - steady-50, steady-100, steady-200: one client sending Poisson arrivals at 50%, 100% and
//     200% of the limit, spread round-robin over the nodes;
//   - bursty: one client alternating bursts at 10× the limit (a sixth of each window) with
//     silence, spread randomly over the nodes;
//   - boundary: one client sending a full limit in the last 2% of a window and another full
//     limit in the first 2% of the next, every third window (the fixed window's weak spot);
//   - many-clients: o.Clients clients whose shares of o.Load × the limit follow a Zipf law (s = 1.1):
//     a few heavy clients above the limit, a long tail far below; spread randomly over the nodes;
//   - uneven-60-20-10-10 and uneven-40-30-20-10 (names for four nodes): one client at 150% of
//     the limit, whose requests reach the nodes unevenly (heavyWeights, unevenWeights), as
//     behind a load balancer with sticky connections;
//   - outage-mid-window: one client at 300% of the limit, round-robin, with its own outage
//     (Trace.Outages) that starts and ends in the middle of a window;
//   - two-outages: one client at 200% of the limit, round-robin, with two outages of a
//     sixth of the trace each.
//
// EstimateTraces adds a larger one, for the estimates only.
func Traces(o TraceOptions) ([]*Trace, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	w, u := o.Limit.Window, o.Limit.Units
	end := start + o.Length*w
	rate := float64(u) / float64(w) // requests per µs at the limit
	var ts []*Trace
	rng := func(i uint64) *rand.Rand { return rand.New(rand.NewPCG(o.Seed, i)) }

	for i, pct := range []int64{50, 100, 200} {
		r := rng(uint64(i))
		t := &Trace{Name: fmt.Sprintf("steady-%d", pct), Nodes: o.Nodes, Keys: 1, Start: start, End: end,
			About: fmt.Sprintf("one client, Poisson arrivals at %d%% of the limit, round-robin over %d nodes", pct, o.Nodes)}
		n := 0
		for at := range poisson(r, start, end, rate*float64(pct)/100) {
			t.Events = append(t.Events, Event{At: at, Node: int32(n % o.Nodes)})
			n++
		}
		ts = append(ts, t)
	}

	{
		r := rng(3)
		t := &Trace{Name: "bursty", Nodes: o.Nodes, Keys: 1, Start: start, End: end,
			About: fmt.Sprintf("one client, bursts at 10× the limit for 1/6 of each window, then silence; random over %d nodes", o.Nodes)}
		for ws := start; ws < end; ws += w {
			for at := range poisson(r, ws, ws+w/6, 10*rate) {
				t.Events = append(t.Events, Event{At: at, Node: int32(r.IntN(o.Nodes))})
			}
		}
		ts = append(ts, t)
	}

	{
		t := &Trace{Name: "boundary", Nodes: o.Nodes, Keys: 1, Start: start, End: end,
			About: fmt.Sprintf("one client, a full limit in the last 2%% of a window and another in the first 2%% of the next, every third window; round-robin over %d nodes", o.Nodes)}
		span := max(w/50, 1)
		n := 0
		for b := start + w; b < end; b += 3 * w {
			for _, from := range []int64{b - span, b} {
				for i := range u {
					t.Events = append(t.Events, Event{At: from + i*span/u, Node: int32(n % o.Nodes)})
					n++
				}
			}
		}
		ts = append(ts, t)
	}

	{
		r := rng(5)
		half := start + max(2, o.Length/2)*w
		t := &Trace{Name: "many-clients", Nodes: o.Nodes, Keys: o.Clients, Start: start, End: half,
			About: fmt.Sprintf("%d clients, Zipf-distributed (s = 1.1) shares of %d× the limit; random over %d nodes", o.Clients, o.Load, o.Nodes)}
		z := rand.NewZipf(r, 1.1, 1, uint64(o.Clients-1))
		for at := range poisson(r, start, half, float64(o.Load)*rate) {
			t.Events = append(t.Events, Event{At: at, Key: int32(z.Uint64()), Node: int32(r.IntN(o.Nodes))})
		}
		ts = append(ts, t)
	}

	for i, weights := range [][]int{heavyWeights(o.Nodes), unevenWeights(o.Nodes)} {
		r := rng(uint64(6 + i))
		total := 0
		for _, x := range weights {
			total += x
		}
		name, shares := "uneven", make([]string, len(weights))
		for j, x := range weights {
			name += fmt.Sprintf("-%d", (200*x+total)/(2*total)) // rounded %
			shares[j] = fmt.Sprintf("%.0f%%", 100*float64(x)/float64(total))
		}
		t := &Trace{Name: name, Nodes: o.Nodes, Keys: 1, Start: start, End: end,
			About: fmt.Sprintf("one client at 150%% of the limit, reaching %d nodes unevenly (%s)", o.Nodes, strings.Join(shares, ", "))}
		for at := range poisson(r, start, end, 1.5*rate) {
			pick, node := r.IntN(total), 0
			for pick >= weights[node] {
				pick -= weights[node]
				node++
			}
			t.Events = append(t.Events, Event{At: at, Node: int32(node)})
		}
		ts = append(ts, t)
	}

	// The failover transitions: outages of the trace's own, mid-window and twice.
	length := o.Length * w
	for i, x := range []struct {
		name, about string
		pct         int64
		outages     [][2]int64
	}{
		{"outage-mid-window", "one client, Poisson arrivals at 300% of the limit, round-robin over %d nodes; Redis unreachable %s", 300,
			[][2]int64{{start + (o.Length/3)*w + w/2, start + (2*o.Length/3)*w + w/2}}},
		{"two-outages", "one client, Poisson arrivals at 200% of the limit, round-robin over %d nodes; Redis unreachable %s", 200,
			[][2]int64{{start + length/4, start + 2*length/5}, {start + 3*length/5, start + 3*length/4}}},
	} {
		r := rng(uint64(10 + i))
		var when []string
		for _, out := range x.outages {
			when = append(when, fmt.Sprintf("from %s to %s", duration(out[0]-start), duration(out[1]-start)))
		}
		t := &Trace{Name: x.name, Nodes: o.Nodes, Keys: 1, Start: start, End: end, Outages: x.outages,
			About: fmt.Sprintf(x.about, o.Nodes, strings.Join(when, " and "))}
		n := 0
		for at := range poisson(r, start, end, rate*float64(x.pct)/100) {
			t.Events = append(t.Events, Event{At: at, Node: int32(n % o.Nodes)})
			n++
		}
		ts = append(ts, t)
	}

	for _, t := range ts {
		// Stable: events generated at one instant keep their order.
		sort.SliceStable(t.Events, func(i, j int) bool { return t.Events[i].At < t.Events[j].At })
		// Requests are held a fifth of a window: the concurrency limit of Algorithms then admits
		// the same rate as the others.
		t.Hold = w / 5
	}
	return ts, nil
}

// EstimateTraces returns the traces on which only the estimates' wrong decisions are measured
// (Algo.Estimate; in Go, without Redis), generated from o.Seed:
//
//   - pareto-clients: o.ParetoClients clients whose rates follow a Pareto law (paretoRate), a
//     few of them above the limit, as in Cloudflare's measure of its sliding window, over
//     o.Length windows; each sends Poisson arrivals, spread randomly over the nodes.
//
// It is too large to replay through Redis in every mode within minutes, and it needs to be:
// the share of wrong decisions is a property of the whole population of clients.
func EstimateTraces(o TraceOptions) ([]*Trace, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	w, u := o.Limit.Window, o.Limit.Units
	end := start + o.Length*w
	rate := float64(u) / float64(w)
	r := rand.New(rand.NewPCG(o.Seed, 8))
	t := &Trace{Name: "pareto-clients", Nodes: o.Nodes, Keys: o.ParetoClients, Start: start, End: end}
	above := 0
	for k := range o.ParetoClients {
		rel := paretoRate(r.Float64())
		if rel > 1 {
			above++
		}
		for at := range poisson(r, start, end, rel*rate) {
			t.Events = append(t.Events, Event{At: at, Key: int32(k), Node: int32(r.IntN(o.Nodes))})
		}
	}
	t.About = fmt.Sprintf("%d clients whose rates follow a Pareto law (α = %g, %g%% of clients above the limit, capped at %g× it; %d drawn above); Poisson arrivals, random over %d nodes",
		o.ParetoClients, paretoAlpha, 100*paretoAbove, paretoCap, above, o.Nodes)
	sort.SliceStable(t.Events, func(i, j int) bool { return t.Events[i].At < t.Events[j].At })
	t.Hold = w / 5
	return []*Trace{t}, nil
}

// The pareto-clients trace: client rates, relative to the limit, follow a Pareto law of shape
// paretoAlpha (the 80/20 law) scaled so that a share paretoAbove of the clients is above the
// limit, capped at paretoCap times the limit.
const (
	paretoAlpha = 1.16
	paretoAbove = 0.03
	paretoCap   = 10.0
)

// paretoRate maps u, uniform in [0, 1), to a client's rate relative to the limit.
func paretoRate(u float64) float64 {
	xm := math.Pow(paretoAbove, 1/paretoAlpha) // P(rate > 1) = (xm/1)^α = paretoAbove
	return min(paretoCap, xm/math.Pow(1-u, 1/paretoAlpha))
}

// heavyWeights returns n node weights: 6, 2, 1, 1 (60%, 20%, 10%, 10%) for four nodes, one
// heavy node and a long tail; for other counts the same list cut short or padded with 1s.
func heavyWeights(n int) []int {
	ws := make([]int, n)
	for i := range ws {
		ws[i] = 1
		if i < 2 {
			ws[i] = []int{6, 2}[i]
		}
	}
	return ws
}

// unevenWeights returns n node weights: 4, 3, 2, 1 (40%, 30%, 20%, 10%) for four nodes; in
// general n, n−1, …, 1.
func unevenWeights(n int) []int {
	ws := make([]int, n)
	for i := range ws {
		ws[i] = n - i
	}
	return ws
}

// poisson yields the arrival times of a Poisson process of rate per µs in [from, to), rounded
// down to whole µs.
func poisson(r *rand.Rand, from, to int64, rate float64) func(func(int64) bool) {
	return func(yield func(int64) bool) {
		if rate <= 0 {
			return
		}
		t := float64(from)
		for {
			t += r.ExpFloat64() / rate
			at := int64(math.Floor(t))
			if at >= to || !yield(at) {
				return
			}
		}
	}
}
