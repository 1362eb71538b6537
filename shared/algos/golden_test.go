package algos

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
)

// The golden file is a recording of the tests below, so it is made by running them.
//go:generate go test -count=1 . -update

// The golden vectors of this package's tests (replay, lreplay) are recorded as they run, and
// testdata/golden.json holds them (Together's, testdata/together.json: together_test.go): store/redisstore replays that file against the Lua scripts on
// a real redis-server, so the scripts are pinned by the same vectors as the Go. A run of the
// whole package fails when the file differs from the vectors; go generate (the directive
// above, which runs them with -update; make generate) rewrites it: the vectors are the tests'
// tables, and the decisions recorded are the ones they check.
var updateGolden = flag.Bool("update", false, "rewrite testdata/golden.json from the golden vectors")

// regenerate is what fixes a stale testdata/golden.json (or testdata/together.json).
const regenerate = "go generate ./shared/algos (or make generate)"

const goldenFile = "testdata/golden.json"

// goldenTrace is the requests of one golden vector on one state, and the decisions they got.
type goldenTrace struct {
	Test   string       `json:"test"`
	Script Script       `json:"script"`
	Steps  []goldenStep `json:"steps"`
}

// goldenStep is a request and its decision.
type goldenStep struct {
	Now     int64 `json:"now"`
	Cost    int64 `json:"cost"`
	MaxWait int64 `json:"max_wait,omitempty"`
	goldenDecision
	// Alg is the script of a step that runs another algorithm on the trace's state (a refund).
	Alg *Script `json:"alg,omitempty"`
}

// goldenDecision is a decision as the golden files hold it; the scripts do not reply the TTL, so
// it is left out.
type goldenDecision struct {
	Allowed    bool  `json:"allowed"`
	Limit      int64 `json:"limit"`
	Remaining  int64 `json:"remaining"`
	ResetAfter int64 `json:"reset_after"`
	RetryAfter int64 `json:"retry_after"`
	Delay      int64 `json:"delay,omitempty"`
	Granted    int64 `json:"granted"`
}

func goldenOf(d Decision) goldenDecision {
	return goldenDecision{d.Allowed, d.Limit, d.Remaining, d.ResetAfter, d.RetryAfter, d.Delay, d.Granted}
}

var golden struct {
	sync.Mutex
	traces map[string]*goldenTrace // by test name and state
	order  []string
}

// record adds a decision of a golden vector to its trace.
func record(t *testing.T, a Algorithm, st *State, r Request, d Decision) {
	golden.Lock()
	defer golden.Unlock()
	key := fmt.Sprintf("%s %p", t.Name(), st)
	tr := golden.traces[key]
	if tr == nil {
		if golden.traces == nil {
			golden.traces = map[string]*goldenTrace{}
		}
		tr = &goldenTrace{Test: t.Name(), Script: a.Script()}
		golden.traces[key] = tr
		golden.order = append(golden.order, key)
	}
	step := goldenStep{Now: r.Now, Cost: r.Cost, MaxWait: r.MaxWait, goldenDecision: goldenOf(d)}
	if sc := a.Script(); sc.Name != tr.Script.Name || !slices.Equal(sc.Args, tr.Script.Args) {
		step.Alg = &sc
	}
	tr.Steps = append(tr.Steps, step)
}

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 && flag.Lookup("test.count").Value.String() != "1" {
		// Each run of a test records its vectors again, as vectors of their own.
		fmt.Fprintln(os.Stderr, "golden vectors: checked with -count=1 only")
	} else if code == 0 {
		for _, check := range []func() error{checkGolden, checkTogether} {
			if err := check(); err != nil {
				fmt.Fprintln(os.Stderr, err)
				code = 1
			}
		}
	}
	os.Exit(code)
}

// checkGolden writes the recorded traces (-update) or checks them against the file (see
// checkVectors).
func checkGolden() error {
	var traces []goldenTrace
	for _, k := range golden.order {
		traces = append(traces, *golden.traces[k])
	}
	return checkVectors(goldenFile, traces, func(t *goldenTrace) *string { return &t.Test })
}

// checkVectors writes the recorded traces to file (-update) or checks them against it: each must
// be in it as recorded; after a run of every test, nothing else may be. test points at a trace's
// test name, which it makes unique (a test's traces numbered in the order they ran) and sorts by.
func checkVectors[T any](file string, traces []T, test func(*T) *string) error {
	seen := map[string]int{}
	for i := range traces {
		name := test(&traces[i])
		seen[*name]++
		*name = fmt.Sprintf("%s #%d", *name, seen[*name])
	}
	slices.SortStableFunc(traces, func(a, b T) int { return cmpStrings(*test(&a), *test(&b)) })
	if *updateGolden {
		b, err := json.MarshalIndent(traces, "", " ")
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			return err
		}
		return os.WriteFile(file, append(b, '\n'), 0o644)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("%s: %v (%s writes it)", file, err, regenerate)
	}
	var inFile []T
	if err := json.NewDecoder(bytes.NewReader(b)).Decode(&inFile); err != nil {
		return fmt.Errorf("%s: %v", file, err)
	}
	in := map[string]string{}
	for i := range inFile {
		j, _ := json.Marshal(inFile[i])
		in[*test(&inFile[i])] = string(j)
	}
	for i := range traces {
		j, _ := json.Marshal(traces[i])
		if name := *test(&traces[i]); in[name] != string(j) {
			return fmt.Errorf("%s: the golden vector %s is not what the file holds: run %s", file, name, regenerate)
		}
	}
	if ranEveryTest() && len(inFile) != len(traces) {
		return fmt.Errorf("%s holds %d golden vectors, the tests %d: run %s", file, len(inFile), len(traces), regenerate)
	}
	return nil
}

// ranEveryTest tells whether this run ran every test: no -run, -skip or -list chose some.
func ranEveryTest() bool {
	for _, name := range []string{"test.run", "test.skip", "test.list"} {
		if f := flag.Lookup(name); f == nil || f.Value.String() != "" {
			return false
		}
	}
	return true
}

func cmpStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
