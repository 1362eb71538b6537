package main

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/diana-gw/diana/bench"
	"github.com/diana-gw/diana/rlqs"
)

// The runs of BenchmarkRLQS, full and quick (b.N is usage reports of 100 buckets each).
var rlqsFlags = [2][]string{{"-benchtime", "1000x", "-count", "3"}, {"-benchtime", "300x", "-count", "1"}}

// rlqsDefaultBuckets and rlqsDefaultStreams are rls.quota's max_buckets and max_streams
// defaults.
const rlqsDefaultBuckets, rlqsDefaultStreams = rlqs.DefaultMaxBuckets, rlqs.DefaultMaxStreams

// rlqsStreams are BenchmarkRLQS's fleets: Envoy instances, each one stream.
var rlqsStreams = []int{16, 64}

// rlqsUnits are the figures of each of BenchmarkRLQS's fleets, in the table's order.
var rlqsUnits = []string{"reports/s", "bucket-reports/s", "cpu-µs/bucket-report", "redis-cpu-µs/bucket-report", "p99-µs", "redis-bytes/bucket"}

// rlqsSection is the rate limit quota service's ceiling, and what it carries beside the rate
// limit service of the section before (BenchmarkRLS, dianad at 64 clients, same report run).
// Its closing paragraph is quoted by docs/envoy.md and docs/api.md, where the two services are
// set side by side.
func rlqsSection(b *strings.Builder, r *results) error {
	b.WriteString("## Envoy's rate limit quota service\n\n")
	b.WriteString(`dianad's rate limit quota service (RLQS, Envoy's ` + "`rate_limit_quota`" + ` filter) in cluster mode, a
separate process on one redis-server as in the section above, and 16 or 64 simulated Envoy
instances, each on one gRPC stream over a connection of its own, each usage report carrying the
same 100 buckets (a fleet sharing per-tenant limits). Envoy reports once a reporting interval;
here each stream sends its next report as soon as the last is answered: the ceiling. A bucket
report is one bucket in one usage report, one call of the fleet script in Redis; every answer
must be a token bucket for each bucket, none from ` + "`on_error`" + `. CPU is dianad's and redis-server's,
from /proc, per bucket report; the p99 is a report's time to its answer (under this closed loop,
mostly the queue); Redis memory is ` + "`MEMORY USAGE`" + ` of the fleet's keys per bucket, each
holding every instance's demand. Medians over the runs [min–max].

`)
	var t strings.Builder
	t.WriteString("Measured by `" + r.RLQSCmd + "`:" + `

| Envoy instances | usage reports/s | bucket reports/s | dianad CPU per bucket report | Redis CPU per bucket report | p99 | Redis memory per bucket |
| ---: | ---: | ---: | ---: | ---: | ---: | ---: |
`)
	v := map[int][]bench.Spread{}
	for _, n := range rlqsStreams {
		name := fmt.Sprintf("BenchmarkRLQS/streams-%d", n)
		for _, unit := range rlqsUnits {
			s, ok := r.RLQS.get(name, unit)
			if !ok {
				return fmt.Errorf("%s: no %s", name, unit)
			}
			v[n] = append(v[n], s)
		}
		x := v[n]
		fmt.Fprintf(&t, "| %d | %s | %s %s | %s µs | %s µs | %s µs | %s bytes |\n", n, num(x[0].Median), num(x[1].Median), spreadNum(x[1]),
			num(x[2].Median), num(x[3].Median), num(x[4].Median), num(x[5].Median))
	}
	const memName = "BenchmarkRLQS/memory"
	var mem []float64
	for _, unit := range []string{"dianad-bytes/stream", "dianad-bytes/bucket"} {
		s, ok := r.RLQS.get(memName, unit)
		if !ok {
			return fmt.Errorf("%s: no %s", memName, unit)
		}
		mem = append(mem, s.Median)
	}
	fmt.Fprintf(&t, "\nIn dianad (%s: a dianad of its own run with `GOGC=1`, its heap and goroutine stacks as 64 streams open with a bucket each, then take 99 more each), a stream holds %s bytes (its gRPC connection and goroutines, and its first bucket), each further bucket %s bytes: `rls.quota`'s defaults, %s buckets over %s streams at most, bound it to about %s MB.\n",
		memName, num(mem[0]), num(mem[1]), num(rlqsDefaultBuckets), num(rlqsDefaultStreams), num((rlqsDefaultStreams*mem[0]+rlqsDefaultBuckets*mem[1])/1e6))
	b.WriteString(quote("rlqs", t.String()))

	// Beside the rate limit service: dianad at 64 clients, from the same report run.
	const rls = "BenchmarkRLS/clients-64"
	var rv []float64
	for _, unit := range []string{"diana-req/s", "diana-cpu-µs/req", "diana-redis-cpu-µs/req"} {
		s, ok := r.RLS.get(rls, unit)
		if !ok {
			return fmt.Errorf("%s: no %s", rls, unit)
		}
		rv = append(rv, s.Median)
	}
	if len(r.Split) == 0 {
		return fmt.Errorf("%s: no split measured", r.SplitCmd)
	}
	var runs []string
	for _, x := range r.Split {
		over, err := time.ParseDuration(x.Over)
		if err != nil || over <= 0 {
			return fmt.Errorf("%s: %s: the time %q", r.SplitCmd, x.Test, x.Over)
		}
		runs = append(runs, fmt.Sprintf("%s, %s admitted for %s (%s/s over %s): %s%%", x.Test, num(x.Admitted), num(x.Limit), num(x.Limit/over.Seconds()), over, x.Off))
	}
	splits := strings.Join(runs, "; ")
	small, large := v[rlqsStreams[0]], v[rlqsStreams[1]]
	n0, n1 := rlqsStreams[0], rlqsStreams[1]
	pairs := small[1].Median // bucket reports a second: (instance, bucket) pairs at an interval of 1 s
	// One paragraph, its sentences on one line: the page wraps it.
	para := strings.Join([]string{
		fmt.Sprintf("**RLQS beside the RLS** (%s; both measured by this page's run).", r.Date),
		fmt.Sprintf("Through the rate limit service every request is a call: one dianad carried %s requests/s at 64 clients, at %s µs of its CPU and %s µs of Redis's each.",
			num(rv[0]), num(rv[1]), num(rv[2])),
		"Through the quota service a request costs dianad nothing: each Envoy instance reports each bucket once a reporting interval, whatever its traffic.",
		fmt.Sprintf("One dianad carried %s bucket reports/s with %d instances per bucket (%s with %d), at %s µs of its CPU and %s µs of Redis's each (%s µs of Redis's with %d).",
			num(pairs), n0, num(large[1].Median), n1, num(small[2].Median), num(small[3].Median), num(large[3].Median), n1),
		fmt.Sprintf("At a reporting interval of 1 s that is %s (instance, bucket) pairs per dianad, each carrying as many requests as its Envoy admits: at 10 requests/s per pair, %s requests/s, %s × the rate limit service's ceiling.",
			num(pairs), num(10*pairs), ratio(10*pairs/rv[0])),
		fmt.Sprintf("The quota service carries more than the rate limit service once each pair sees more than %s requests/s (%s with %d instances).",
			num(rv[0]/pairs), num(rv[0]/large[1].Median), n1),
		fmt.Sprintf("Its limit holds to within a few percent, not exactly (measured by `%s`, Envoy's part played over real gRPC streams on a virtual clock: three instances sending 30, 60 and 150 requests/s, the third falling to 40 after 30 s, against one limit, lowered on reload in TestSplitCluster's second run): %s.",
			r.SplitCmd, splits),
	}, " ")
	b.WriteString("\n" + quote("rlqs-vs-rls", para) + "\n")
	return nil
}

// spreadNum writes the smallest and largest run of a figure in brackets: "[1,000–1,200]", or
// nothing when there was one run.
func spreadNum(s bench.Spread) string {
	if s.Min == s.Max {
		return ""
	}
	return "[" + num(s.Min) + "–" + num(s.Max) + "]"
}

// splitRun is one run of the RLQS split's accuracy tests: what the simulated Envoy instances
// admitted together against the limit over a time.
type splitRun struct {
	Test            string // the test (and subtest) that logged it
	Admitted, Limit float64
	Over, Off       string // the time ("1m0s"), and the difference in percent ("+1.88")
}

// The rlqs tests whose logs state the split's accuracy, and the line each logs (checkSplit).
const splitTests = "TestSplitLocal|TestSplitCluster"

var (
	splitRunLine = regexp.MustCompile(`^=== RUN\s+(\S+)`)
	splitLine    = regexp.MustCompile(`admitted \[[^]]*\] = (\d+), limit (\d+) over (\S+): ([-+][\d.]+)%`)
)

// parseSplit reads the runs of go test -v output of splitTests.
func parseSplit(out string) []splitRun {
	var runs []splitRun
	test := ""
	for _, line := range strings.Split(out, "\n") {
		if m := splitRunLine.FindStringSubmatch(line); m != nil {
			test = m[1]
			continue
		}
		if m := splitLine.FindStringSubmatch(line); m != nil {
			a, _ := strconv.ParseFloat(m[1], 64)
			l, _ := strconv.ParseFloat(m[2], 64)
			runs = append(runs, splitRun{Test: test, Admitted: a, Limit: l, Over: m[3], Off: m[4]})
		}
	}
	return runs
}
