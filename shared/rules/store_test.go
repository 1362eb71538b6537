package rules_test

import (
	"context"
	"reflect"
	"testing"

	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/rules"
)

// TestNewOp checks that NewOp makes the op an Engine makes for a rule: its algorithm, fail
// policy, fallback and Rule().
func TestNewOp(t *testing.T) {
	r := mustRule(t, `{"name": "r", "mode": "cluster", "on_error": "local", "nodes": 4,
		"limit": {"algorithm": "fixed_window", "limit": 100, "window": "1m"}}`)
	var seen []rules.Op
	capture := rules.Each(func(string, algos.Algorithm, algos.Request) algos.Decision { return algos.Decision{Allowed: true} })
	store := storeFunc(func(ctx context.Context, ops []*rules.Op) {
		for _, op := range ops {
			seen = append(seen, *op)
		}
		capture.Decide(ctx, ops)
	})
	eng, err := rules.New([]*rules.Rule{r}, rules.Options{Cluster: store})
	if err != nil {
		t.Fatal(err)
	}
	eng.Check(context.Background(), &rules.Input{Path: "/"})
	if len(seen) == 0 {
		t.Fatal("the engine decided no op")
	}
	got := rules.NewOp(r, seen[0].Key, seen[0].Req)
	if got.Rule() != r || seen[0].Rule() != r {
		t.Errorf("Rule() = %p (NewOp), %p (engine), want %p", got.Rule(), seen[0].Rule(), r)
	}
	if !reflect.DeepEqual(got, seen[0]) {
		t.Errorf("NewOp = %+v, want the engine's op %+v", got, seen[0])
	}
	if got.Alg != r.Alg || got.Fallback != r.Fallback || got.OnError != rules.FailLocal || got.Fallback == nil {
		t.Errorf("NewOp = %+v: want the rule's algorithm, fallback and on_error local", got)
	}
}

type storeFunc func(ctx context.Context, ops []*rules.Op)

func (f storeFunc) Decide(ctx context.Context, ops []*rules.Op) { f(ctx, ops) }
