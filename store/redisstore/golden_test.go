package redisstore

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/diana-gw/diana/internal/redistest"
	"github.com/diana-gw/diana/shared/algos"
)

// TestGoldenLua replays the golden vectors of shared/algos' tests (its testdata/golden.json,
// written from the same tables that pin the Go) against the Lua scripts on a real redis-server:
// every decision must be the one the vector pins.
func TestGoldenLua(t *testing.T) {
	var traces []struct {
		Test   string
		Script algos.Script
		Steps  []struct {
			Now     int64 `json:"now"`
			Cost    int64 `json:"cost"`
			MaxWait int64 `json:"max_wait"`
			vectorDecision
			Alg *algos.Script
		}
	}
	readVectors(t, "golden.json", &traces)
	if len(traces) < 10 {
		t.Fatalf("only %d golden vectors", len(traces))
	}
	srv := redistest.Start(t)
	s := New(srv.Client(), Options{CallerClock: true})
	// The vectors start at 0 and some go back before it; the scripts take times ≥ 0. A shift by a
	// whole number of days keeps every window where it was.
	const shift = 10_000 * algos.Day
	for i, tr := range traces {
		alg := scripted(tr.Script)
		key := "golden:" + tr.Test
		for j, st := range tr.Steps {
			r := algos.Request{Now: st.Now + shift, Cost: st.Cost, MaxWait: st.MaxWait}
			stepAlg := alg
			if st.Alg != nil {
				sc := *st.Alg
				if strings.HasSuffix(sc.Name, "_refund") {
					// A refund's last argument is the time its units were granted at.
					sc.Args = slices.Clone(sc.Args)
					sc.Args[len(sc.Args)-1] += shift
				}
				stepAlg = scripted(sc)
			}
			got, err := s.DecideOne(context.Background(), key, stepAlg, r)
			if err != nil {
				t.Fatal(err)
			}
			if want := st.decision(); got != want {
				t.Errorf("vector %d, %s, step %d (%+v):\n  lua    %+v\n  golden %+v", i, tr.Test, j, r, got, want)
				break
			}
		}
	}
}

// vectorDecision is a decision as shared/algos' golden files hold it (the scripts do not reply
// the TTL).
type vectorDecision struct {
	Allowed    bool  `json:"allowed"`
	Limit      int64 `json:"limit"`
	Remaining  int64 `json:"remaining"`
	ResetAfter int64 `json:"reset_after"`
	RetryAfter int64 `json:"retry_after"`
	Delay      int64 `json:"delay"`
	Granted    int64 `json:"granted"`
}

func (v vectorDecision) decision() algos.Decision {
	return algos.Decision{Allowed: v.Allowed, Limit: v.Limit, Remaining: v.Remaining,
		ResetAfter: v.ResetAfter, RetryAfter: v.RetryAfter, Delay: v.Delay, Granted: v.Granted}
}

// readVectors reads the golden file name of shared/algos' testdata into v.
func readVectors(t *testing.T, name string, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "shared", "algos", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}

// scripted is an algorithm known by its Script alone, as a golden vector records it: the Redis
// store runs its Lua twin and never calls Decide.
type scripted algos.Script

func (s scripted) Script() algos.Script { return algos.Script(s) }

func (s scripted) Decide(*algos.State, algos.Request) algos.Decision {
	panic("redisstore decides with the Lua script")
}
