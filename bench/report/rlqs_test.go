package main

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// rlqsFixture adds to r the figures of BenchmarkRLQS (over two runs: v and 2v, as fixture's)
// and of the split's tests.
func rlqsFixture(r *results) {
	r.RLQSCmd, r.SplitCmd, r.RLQS = "go test rlqs", "go test split", benchRuns{}
	for i, n := range rlqsStreams {
		name := fmt.Sprintf("BenchmarkRLQS/streams-%d", n)
		r.RLQS[name] = map[string][]float64{}
		for _, unit := range rlqsUnits {
			v := 1000.0 / float64(i+1)
			if unit == "redis-cpu-µs/bucket-report" {
				v = 10 * float64(i+1)
			}
			r.RLQS[name][unit] = []float64{v * 2 / 3, v * 4 / 3} // the median is v
		}
	}
	r.RLQS["BenchmarkRLQS/memory"] = map[string][]float64{"dianad-bytes/stream": {100000}, "dianad-bytes/bucket": {1000}}
	r.Split = []splitRun{{"TestSplitLocal/steady", 6113, 6000, "1m0s", "+1.88"}, {"TestSplitCluster", 801, 800, "20s", "+0.12"}}
}

// The RLQS section states each fleet's figures, and beside the RLS's (fixture: 1,500 req/s at
// 1,500 µs of dianad's CPU and Redis's each) the requests it carries and the split's accuracy.
func TestRLQSSection(t *testing.T) {
	r := fixture(1)
	md, _, err := page(r)
	if err != nil {
		t.Fatal(err)
	}
	flat := strings.Join(strings.Fields(md), " ")
	for _, w := range []string{
		"Measured by `go test rlqs`",
		"a stream holds 100,000 bytes (its gRPC connection and goroutines, and its first bucket), each further bucket 1,000 bytes: `rls.quota`'s defaults, 100,000 buckets over 10,000 streams at most, bound it to about 1,100 MB.",
		"| 16 | 1,000 | 1,000 [667–1,333] | 1,000 µs | 10.0 µs | 1,000 µs | 1,000 bytes |",
		"| 64 | 500 | 500 [333–667] | 500 µs | 20.0 µs | 500 µs | 500 bytes |",
		"one dianad carried 1,500 requests/s at 64 clients, at 1,500 µs of its CPU and 1,500 µs of Redis's each",
		"One dianad carried 1,000 bucket reports/s with 16 instances per bucket (500 with 64), at 1,000 µs of its CPU and 10.0 µs of Redis's each (20.0 µs of Redis's with 64)",
		"that is 1,000 (instance, bucket) pairs per dianad",
		"at 10 requests/s per pair, 10,000 requests/s, 6.67 × the rate limit service's ceiling",
		"once each pair sees more than 1.50 requests/s (3.00 with 64 instances)",
		"measured by `go test split`",
		"TestSplitLocal/steady, 6,113 admitted for 6,000 (100/s over 1m0s): +1.88%; TestSplitCluster, 801 admitted for 800 (40.0/s over 20s): +0.12%",
	} {
		if !strings.Contains(flat, w) {
			t.Errorf("the page lacks %q", w)
		}
	}
	if t.Failed() {
		t.Logf("the page:\n%s", md)
	}
	for _, tc := range []struct {
		change func(r *results)
		want   string
	}{
		{func(r *results) { delete(r.RLQS["BenchmarkRLQS/streams-64"], "p99-µs") }, "BenchmarkRLQS/streams-64: no p99-µs"},
		{func(r *results) { delete(r.RLS["BenchmarkRLS/clients-64"], "diana-req/s") }, "BenchmarkRLS/clients-64: no diana-req/s"},
		{func(r *results) { delete(r.RLQS, "BenchmarkRLQS/memory") }, "BenchmarkRLQS/memory: no dianad-bytes/stream"},
		{func(r *results) { r.Split = nil }, "go test split: no split measured"},
		{func(r *results) { r.Split[0].Over = "0s" }, `go test split: TestSplitLocal/steady: the time "0s"`},
	} {
		r := fixture(1)
		tc.change(r)
		if _, _, err := page(r); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want one with %q", err, tc.want)
		}
	}
}

// The split's runs are read from go test -v output, each with its (sub)test.
func TestParseSplit(t *testing.T) {
	out := `=== RUN   TestSplitLocal
=== RUN   TestSplitLocal/steady
    service_test.go:84: admitted [1073 2127 2913] = 6113, limit 6000 over 1m0s: +1.88%
=== RUN   TestSplitCluster
    service_test.go:152: admitted [1073 2127 2913] = 6113, limit 6000 over 1m0s: +1.88%
    service_test.go:158: admitted [185 369 247] = 799, limit 800 over 20s: -0.12%
--- PASS: TestSplitCluster (0.08s)
`
	got := parseSplit(out)
	want := []splitRun{{"TestSplitLocal/steady", 6113, 6000, "1m0s", "+1.88"}, {"TestSplitCluster", 6113, 6000, "1m0s", "+1.88"}, {"TestSplitCluster", 799, 800, "20s", "-0.12"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// docs/envoy.md and docs/api.md set the two services side by side with the page's figures
// (TestREADMEQuotesPage keeps the quotes the page's, word for word).
func TestDocsQuotePage(t *testing.T) {
	for _, f := range []string{"../../docs/envoy.md", "../../docs/api.md"} {
		doc, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		names, _, err := quotes(string(doc))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(strings.Join(names, " "), "rlqs-vs-rls") {
			t.Errorf("%s does not quote rlqs-vs-rls", f)
		}
	}
}
