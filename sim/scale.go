package sim

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/diana-gw/diana/shared/algos"
)

// ScaleLimit is the limit of the batched-mode run: one hot key, such as an account's API quota,
// at 1,000 requests per second.
func ScaleLimit() Limit { return Limit{Units: 1000, Window: algos.Second} }

// ScaleBatch is the batch block of the batched-mode run: batches of up to 100 units, each
// algorithm's default max_age (see algos.Lease).
func ScaleBatch() BatchOptions { return BatchOptions{Min: 1, Max: 100} }

// RunScale measures what batched mode is for: the steady traces and the uneven traces of one
// hot key at ScaleLimit, through the algorithms batched mode runs, in cluster and in batched mode
// (ScaleBatch) on nodes nodes.
func RunScale(ctx context.Context, c redis.UniversalClient, seed uint64, nodes, parallel int, keyLife time.Duration) (*Report, error) {
	l := ScaleLimit()
	all, err := Traces(TraceOptions{Seed: seed, Limit: l, Nodes: nodes, Clients: 2})
	if err != nil {
		return nil, err
	}
	var traces []*Trace
	for _, t := range all {
		switch t.Name {
		case "steady-50", "steady-100", "steady-200", traceHeavy, "uneven-40-30-20-10":
			traces = append(traces, t)
		}
	}
	var batchable []Algo
	for _, a := range Algorithms(l, l.Window/5) {
		if a.Batchable() {
			batchable = append(batchable, a)
		}
	}
	b := ScaleBatch()
	rep, err := Run(ctx, Options{Seed: seed, Limit: l, Traces: traces, Algos: batchable, Parallel: parallel, KeyLife: keyLife,
		Modes: []Mode{Cluster(c), Batched(c, b)}})
	if err != nil {
		return nil, err
	}
	rep.Batch = &b
	return rep, nil
}

// hotKeyMarkdown returns the section of the report on d.HotKey, a RunScale run: Redis calls per
// request in cluster and batched mode, and what batching costs.
func (d *Data) hotKeyMarkdown() []byte {
	r := d.HotKey
	var b bytes.Buffer
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	lo := r.Batch
	p("## Batched mode on a hot key\n\n")
	p("The tables above limit each client to %d per %s, so a node spends a few units a minute and its batches stay small. ",
		d.Main.Limit.Units, duration(d.Main.Limit.WindowMicros))
	p("Batched mode is made for hot keys: here one client at **%d requests per %s**, spread over %d nodes, ",
		r.Limit.Units, duration(r.Limit.WindowMicros), r.Nodes)
	p("in cluster mode and in batched mode with `batch: {max: %d}` (min %d, each algorithm's default max_age). ", lo.Max, lo.Min)
	p("Calls are Redis script calls per offered request; over and under are as above, in %% of ideal.\n\n")
	p("| trace | algorithm | cluster calls/request | batched calls/request | fewer calls | cluster over / under | batched over / under |\n")
	p("|---|---|---:|---:|---:|---:|---:|\n")
	for _, t := range r.Traces {
		for _, a := range r.Algorithms {
			c, l, ok := r.pair(t.Name, a.Name)
			if !ok {
				continue
			}
			p("| %s | %s | %.3f | %.4f | %.1f× | %s | %s |\n", t.Name, a.Name,
				float64(c.RedisCalls)/float64(c.Offered), float64(l.RedisCalls)/float64(l.Offered),
				float64(c.RedisCalls)/float64(l.RedisCalls), cell(c), cell(l))
		}
	}
	p("\nAn estimate's over-admission is its own (cluster mode shows the same). ")
	p("A batch is about what the node spends in max_age, so the saving grows with the rate and with max_age; ")
	p("the sliding log and the buckets pay for a longer max_age in strictness (a longer log window, a smaller burst), the windows do not.\n")
	return b.Bytes()
}

// pair returns the cluster and batched results of trace and algo, if both ran.
func (s *Section) pair(trace, algo string) (cluster, batched Result, ok bool) {
	c, ok1 := s.Result(trace, algo, "cluster")
	l, ok2 := s.Result(trace, algo, "batched")
	if !ok1 || !ok2 || l.Skipped != "" || c.Offered == 0 || l.RedisCalls == 0 {
		return c, l, false
	}
	return c, l, true
}
