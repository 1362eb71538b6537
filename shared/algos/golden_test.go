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

// The golden vectors of this package's tests (replay, lreplay) are recorded as they run, and
// testdata/golden.json holds them (Together's, testdata/together.json: together_test.go): store/redisstore replays that file against the Lua scripts on
// a real redis-server, so the scripts are pinned by the same vectors as the Go. A run of the
// whole package fails when the file differs from the vectors; go test -update (make generate)
// rewrites it.
var updateGolden = flag.Bool("update", false, "rewrite testdata/golden.json from the golden vectors")

const goldenFile = "testdata/golden.json"

// goldenTrace is the requests of one golden vector on one state, and the decisions they got.
type goldenTrace struct {
	Test   string       `json:"test"`
	Script Script       `json:"script"`
	Steps  []goldenStep `json:"steps"`
}

// goldenStep is a request and its decision; the scripts do not reply the TTL, so it is left out.
type goldenStep struct {
	Now        int64 `json:"now"`
	Cost       int64 `json:"cost"`
	MaxWait    int64 `json:"max_wait,omitempty"`
	Allowed    bool  `json:"allowed"`
	Limit      int64 `json:"limit"`
	Remaining  int64 `json:"remaining"`
	ResetAfter int64 `json:"reset_after"`
	RetryAfter int64 `json:"retry_after"`
	Delay      int64 `json:"delay,omitempty"`
	Granted    int64 `json:"granted"`
	// Alg is the script of a step that runs another algorithm on the trace's state (a refund).
	Alg *Script `json:"alg,omitempty"`
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
	step := goldenStep{r.Now, r.Cost, r.MaxWait, d.Allowed, d.Limit, d.Remaining, d.ResetAfter, d.RetryAfter, d.Delay, d.Granted, nil}
	if sc := a.Script(); sc.Name != tr.Script.Name || !slices.Equal(sc.Args, tr.Script.Args) {
		step.Alg = &sc
	}
	tr.Steps = append(tr.Steps, step)
}

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		for _, check := range []func() error{checkGolden, checkTogether} {
			if err := check(); err != nil {
				fmt.Fprintln(os.Stderr, err)
				code = 1
			}
		}
	}
	os.Exit(code)
}

// checkGolden writes the recorded traces (-update) or checks them against the file: each must be
// in it; after a run of every test, nothing else may be.
func checkGolden() error {
	var traces []goldenTrace
	for _, k := range golden.order {
		traces = append(traces, *golden.traces[k])
	}
	seen := map[string]int{}
	for i := range traces { // a test's traces in the order they ran, tests by name
		seen[traces[i].Test]++
		traces[i].Test = fmt.Sprintf("%s #%d", traces[i].Test, seen[traces[i].Test])
	}
	slices.SortStableFunc(traces, func(a, b goldenTrace) int {
		return cmpStrings(a.Test, b.Test)
	})
	if *updateGolden {
		b, err := json.MarshalIndent(traces, "", " ")
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(goldenFile), 0o755); err != nil {
			return err
		}
		return os.WriteFile(goldenFile, append(b, '\n'), 0o644)
	}
	b, err := os.ReadFile(goldenFile)
	if err != nil {
		return fmt.Errorf("%s: %v (go test -update writes it)", goldenFile, err)
	}
	var file []goldenTrace
	if err := json.NewDecoder(bytes.NewReader(b)).Decode(&file); err != nil {
		return fmt.Errorf("%s: %v", goldenFile, err)
	}
	in := map[string]string{}
	for _, tr := range file {
		j, _ := json.Marshal(tr)
		in[tr.Test] = string(j)
	}
	for _, tr := range traces {
		j, _ := json.Marshal(tr)
		if in[tr.Test] != string(j) {
			return fmt.Errorf("%s: the golden vector %s is not what the file holds: go test ./shared/algos -update", goldenFile, tr.Test)
		}
	}
	if ranEveryTest() && len(file) != len(traces) {
		return fmt.Errorf("%s holds %d golden vectors, the tests %d: go test ./shared/algos -update", goldenFile, len(file), len(traces))
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
