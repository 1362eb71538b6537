package rules_test

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/conf"
	"github.com/diana-gw/diana/shared/rules"
)

// A Spec filled in Go, as the Kong plugin and the rate limit service fill it, is checked as a
// document's rule is: every error, each with the path a document would have.
func TestSpecRule(t *testing.T) {
	valid := func() rules.Spec {
		s := rules.NewSpec()
		s.Name = "r"
		s.Limit = rules.LimitSpec{Algorithm: "token_bucket", Params: rules.Params{"rate": 10}}
		return s
	}
	tests := []struct {
		name  string
		edit  func(s *rules.Spec)
		paths []string // of the errors, in order; none: valid
	}{
		{"valid", func(s *rules.Spec) {}, nil},
		{"no name", func(s *rules.Spec) { s.Name = "" }, []string{"name"}},
		{"name with a space", func(s *rules.Spec) { s.Name = "a b" }, []string{"name"}},
		{"no limit", func(s *rules.Spec) { s.Limit = rules.LimitSpec{} }, []string{"limit.algorithm"}},
		{"unknown algorithm", func(s *rules.Spec) { s.Limit.Algorithm = "nope" }, []string{"limit.algorithm"}},
		{"required parameter missing", func(s *rules.Spec) { s.Limit.Params = rules.Params{} }, []string{"limit.rate"}},
		{"parameter out of bounds", func(s *rules.Spec) { s.Limit.Params["rate"] = 0 }, []string{"limit.rate"}},
		{"unknown parameter", func(s *rules.Spec) { s.Limit.Params["window"] = 1 }, []string{"limit.window"}},
		{"excluded parameters", func(s *rules.Spec) {
			s.Limit = rules.LimitSpec{Algorithm: "leaky_bucket", Params: rules.Params{"rate": 1, "delay": 1, "nodelay": 1}}
		}, []string{"limit.nodelay"}},
		{"cost negative", func(s *rules.Spec) { s.Cost = -1 }, []string{"cost"}},
		{"status out of bounds", func(s *rules.Spec) { s.Reply.Status = 200 }, []string{"reply.status"}},
		{"no nodes", func(s *rules.Spec) { s.Nodes = 0 }, []string{"nodes"}},
		{"ban too long", func(s *rules.Spec) { s.Ban = algos.MaxSpan + 1 }, []string{"ban"}},
		{"delay without max_delay", func(s *rules.Spec) { s.Action = rules.Delay }, []string{"max_delay"}},
		{"bad dimension", func(s *rules.Spec) { s.By = []string{"ip", "planet"} }, []string{"by[1]"}},
		{"bad path", func(s *rules.Spec) { s.Match.Paths = []string{"api"} }, []string{"match.paths"}},
		{"exception of an exception", func(s *rules.Spec) {
			s.Match.Not = []rules.Match{{Paths: []string{"/a"}, Not: []rules.Match{{Paths: []string{"/b"}}}}}
		}, []string{"match.not[0].not"}},
		{"empty exception", func(s *rules.Spec) { s.Match.Not = []rules.Match{{}} }, []string{"match.not"}},
		{"batch in local mode", func(s *rules.Spec) { s.Batch = &rules.BatchSpec{Max: 10} }, []string{"batch"}},
		{"batch min above max", func(s *rules.Spec) {
			s.Mode, s.Batch = rules.Cluster, &rules.BatchSpec{Min: 20, Max: 10}
		}, []string{"batch.min"}},
		{"unlimited with a limit", func(s *rules.Spec) { s.Unlimited, s.Match.Paths = true, []string{"/health"} }, []string{"unlimited"}},
		{"several at once", func(s *rules.Spec) { s.Name, s.Cost, s.Reply.Status = "", -1, 1000 },
			[]string{"name", "cost", "reply.status"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := valid()
			tt.edit(&s)
			r, err := s.Rule()
			var got []string
			var ce *conf.Errors
			if errors.As(err, &ce) {
				for _, e := range ce.List {
					got = append(got, e.Path)
				}
			}
			if strings.Join(got, " ") != strings.Join(tt.paths, " ") {
				t.Fatalf("errors at %q, want at %q: %v", got, tt.paths, err)
			}
			if err == nil && (r.Alg == nil || r.Name != "r") {
				t.Errorf("valid spec built %+v", r)
			}
		})
	}
}

// A Spec and the same rule written as a document build the same rule.
func TestSpecEqualsDocument(t *testing.T) {
	s := rules.NewSpec()
	s.Name, s.By, s.Cost, s.Mode, s.OnError, s.Nodes = "api", []string{"ip"}, 2, rules.Cluster, rules.FailLocal, 4
	s.Limit = rules.LimitSpec{Algorithm: "token_bucket", Params: rules.Params{"rate": 100, "period": algos.Minute}}
	s.Match.Paths = []string{"/api/**"}
	fromSpec, err := s.Rule()
	if err != nil {
		t.Fatal(err)
	}
	fromDoc := mustRule(t, `{"name": "api", "by": "ip", "cost": 2, "mode": "cluster", "on_error": "local", "nodes": 4,
		"match": {"paths": "/api/**"}, "limit": {"algorithm": "token_bucket", "rate": 100, "period": "1m"}}`)
	want := *fromDoc
	want.Alg, want.Fallback, want.Leases = nil, nil, false // checkRule leaves them out
	checkRule(t, fromSpec, want)
	if a, b := fromSpec.Alg.Script(), fromDoc.Alg.Script(); a.Name != b.Name || !slices.Equal(a.Args, b.Args) {
		t.Errorf("Alg = %+v, document's %+v", a, b)
	}
	if a, b := fromSpec.Fallback.Script(), fromDoc.Fallback.Script(); !slices.Equal(a.Args, b.Args) {
		t.Errorf("Fallback = %+v, document's %+v", a, b)
	}
}

// Resolve fills in what a limit leaves out: defaults, and Same (a bucket's burst is its rate).
func TestResolve(t *testing.T) {
	tb, _ := rules.Algorithm("token_bucket")
	p := tb.Resolve(rules.Params{"rate": 7})
	if p["rate"] != 7 || p["period"] != algos.Second || p["burst"] != 7 {
		t.Errorf("Resolve = %v, want rate 7, period 1s, burst 7", p)
	}
	if p := tb.Resolve(rules.Params{"rate": 7, "burst": 3}); p["burst"] != 3 {
		t.Errorf("Resolve kept burst %d, want 3", p["burst"])
	}
}

// Largest is exactly the bound the algorithm enforces: the algorithm takes the parameter at
// Largest and refuses it, on that parameter, one above (the Kong plugin lowers to it).
func TestLargest(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, name := range rules.Algorithms() {
		kind, _ := rules.Algorithm(name)
		for _, p := range kind.Params {
			if p.Largest == nil {
				continue
			}
			for i := 0; i < 2000; i++ {
				given := rules.Params{}
				for _, q := range kind.Params {
					if q.Required || q.Role == rules.Window {
						given[q.Name] = q.Min + rng.Int64N(q.Max-q.Min+1)>>uint(rng.IntN(50))
					}
				}
				v := kind.Resolve(given)
				most := p.Largest(v)
				if most < p.Min {
					continue
				}
				v[p.Name] = most
				if _, err := kind.Build(v, 1); err != nil {
					t.Fatalf("%s: %s = Largest %d refused: %v (params %v)", name, p.Name, most, err, v)
				}
				if most >= p.Max {
					continue
				}
				v[p.Name] = most + 1
				var pe *algos.ParamError
				if _, err := kind.Build(v, 1); !errors.As(err, &pe) || pe.Param != p.Name {
					t.Fatalf("%s: %s = Largest+1 = %d: err %v, want a ParamError on %s (params %v)", name, p.Name, most+1, err, p.Name, v)
				}
			}
		}
	}
}
