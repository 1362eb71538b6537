package main

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/diana-gw/diana/bench"
)

// benchRuns are the figures of go test -bench output: benchmark name (without the -GOMAXPROCS
// suffix) → unit → the values of its runs (-count), in order.
type benchRuns map[string]map[string][]float64

var procsSuffix = regexp.MustCompile(`-\d+$`)

// parseBench reads the result lines of go test -bench output ("BenchmarkX/sub-2  N  v unit
// v unit ..."), ignoring every other line.
func parseBench(out string) benchRuns {
	runs := benchRuns{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue
		}
		name := procsSuffix.ReplaceAllString(f[0], "")
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			if runs[name] == nil {
				runs[name] = map[string][]float64{}
			}
			runs[name][f[i+1]] = append(runs[name][f[i+1]], v)
		}
	}
	return runs
}

// get returns the spread of unit's values in benchmark name, and whether there were any.
func (r benchRuns) get(name, unit string) (bench.Spread, bool) {
	v := r[name][unit]
	if len(v) == 0 {
		return bench.Spread{}, false
	}
	return bench.SpreadOf(v), true
}
