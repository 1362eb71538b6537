package sim

import (
	"context"
	"reflect"
	"slices"
	"testing"

	"github.com/diana-gw/diana/internal/redistest"
	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/rules"
)

// TestAlgoRules checks that the rule failover mode decodes for each algorithm (Algo.Rule)
// builds exactly the algorithm the other modes run, so that the shares the nodes learn scale
// the limit under test; and that, on 4 nodes of limits that divide by 4, its fallback without
// history is local-split's limit / nodes.
func TestAlgoRules(t *testing.T) {
	for _, c := range []struct {
		l    Limit
		hold int64
	}{
		{DefaultLimit(), DefaultLimit().Window / 5},
		{smallLimit, smallLimit.Window / 5},
		{Limit{Units: 3, Window: 10 * algos.Millisecond}, 2 * algos.Millisecond}, // TestSlowMachine's
	} {
		for _, a := range Algorithms(c.l, c.hold) {
			if a.Limit == "" {
				if slices.Contains(rules.Algorithms(), a.Name) {
					t.Errorf("%s: no Limit, so failover mode skips an algorithm a config can name", a.Name)
				}
				continue
			}
			r, err := a.Rule(4)
			if err != nil {
				t.Fatalf("%s: %v", a.Name, err)
			}
			want, err := a.New(1)
			if err != nil {
				t.Fatal(err)
			}
			if r.Name != a.Name || r.Mode != rules.Cluster || r.OnError != rules.FailLocal || r.Nodes != 4 {
				t.Errorf("%s: rule %q, mode %s, on_error %s, nodes %d", a.Name, r.Name, r.Mode, r.OnError, r.Nodes)
			}
			if !reflect.DeepEqual(r.Alg, want) {
				t.Errorf("%s, %d per %d µs: the rule's algorithm is %#v, the sim's %#v", a.Name, c.l.Units, c.l.Window, r.Alg, want)
			}
			if c.l.Units%4 == 0 {
				split, err := a.New(4)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(r.Fallback, split) {
					t.Errorf("%s, %d per %d µs: the rule's fallback is %#v, local-split's %#v", a.Name, c.l.Units, c.l.Window, r.Fallback, split)
				}
			}
		}
	}
}

// TestFailoverLearnsShares replays one client at exactly the limit, 1,000 requests a second,
// 90% of them on one node of two: through the outage each node limits at its learned share
// (drawn a little toward the even split, +2%), 91 and 11 of the 100 per window, so failover mode
// admits exactly what cluster mode does, where limit / 2 (local-split) refuses 40 of node 0's 90
// per window.
func TestFailoverLearnsShares(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	keyLife, err := KeyLife(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	const ms = algos.Millisecond
	l := Limit{Units: 100, Window: 100 * ms}
	tr := &Trace{Name: "ninety-ten", Nodes: 2, Keys: 1, Start: start, End: start + 9*algos.Second}
	for i := range int64(9000) {
		tr.Events = append(tr.Events, Event{At: start + i*ms, Node: int32(min(i%10, 1)) ^ 1}) // node 1 every tenth
	}
	var algs []Algo
	for _, a := range Algorithms(l, 20*ms) {
		if a.Name == "fixed_window" {
			algs = append(algs, a)
		}
	}
	rep, err := Run(ctx, Options{Limit: l, Traces: []*Trace{tr}, Algos: algs, KeyLife: keyLife,
		Modes: []Mode{LocalSplit(), Failover(c, [2]float64{1.0 / 3, 2.0 / 3})}})
	if err != nil {
		t.Fatal(err)
	}
	f, _ := rep.Result(tr.Name, "fixed_window", "failover")
	if f.Ideal != 9000 || f.Admitted != f.Ideal || f.Over != 0 || f.Under != 0 {
		t.Errorf("failover: admitted %d, ideal %d, over %d, under %d: want every one of the 9,000 requests, as the learned shares admit", f.Admitted, f.Ideal, f.Over, f.Under)
	}
	s, _ := rep.Result(tr.Name, "fixed_window", "local-split")
	if s.Under != 40*90 {
		t.Errorf("local-split: under %d, want 40 of node 0's 90 per window, in 90 windows (3,600)", s.Under)
	}
	if f.RedisCalls != 6000 {
		t.Errorf("failover: %d Redis calls, want one for each of the 6,000 requests outside the outage (the exchanges are not counted)", f.RedisCalls)
	}
}
