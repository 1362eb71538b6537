package sim

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/diana-gw/diana/internal/redistest"
	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/rules"
)

// smallLimit keeps the test traces short: 20 requests per minute per client.
var smallLimit = Limit{Units: 20, Window: algos.Minute}

func smallTraces(t *testing.T, seed uint64) []*Trace {
	t.Helper()
	o := TraceOptions{Seed: seed, Limit: smallLimit, Length: 4, Clients: 50, Load: 5, ParetoClients: 100}
	ts, err := Traces(o)
	if err != nil {
		t.Fatal(err)
	}
	est, err := EstimateTraces(o)
	if err != nil {
		t.Fatal(err)
	}
	return append(ts, est...)
}

// TestRun replays short traces through every algorithm in every mode, on a real Redis, and
// checks the figures the report stands on.
func TestRun(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	keyLife, err := KeyLife(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if keyLife < 59*time.Minute {
		t.Fatalf("a key written with the caller's clock lives %s: want the scripts' hour, which keeps a slow run's state", keyLife)
	}
	opts := func() Options {
		ts := smallTraces(t, 7)
		return Options{Seed: 7, Limit: smallLimit, Traces: ts[:len(ts)-1], EstimateTraces: ts[len(ts)-1:], Parallel: 4, KeyLife: keyLife,
			Modes: []Mode{LocalFull(), LocalSplit(), Cluster(c), Batched(c, StandardBatch(smallLimit)), Failover(c, StandardOutage)}}
	}
	rep, err := Run(ctx, opts())
	if err != nil {
		t.Fatal(err)
	}

	t.Run("exact algorithms never over-admit in cluster and batched modes", func(t *testing.T) {
		for _, r := range rep.Results {
			if r.Skipped != "" || estimate(rep, r.Algo) || (r.Mode != "cluster" && r.Mode != "batched") {
				continue // the weighted estimate is judged against the exact log, which it only approximates
			}
			if r.Over != 0 || r.MaxExcess != 0 {
				t.Errorf("%s, %s, %s: over-admitted %d (max %d in a window)", r.Trace, r.Algo, r.Mode, r.Over, r.MaxExcess)
			}
		}
	})

	t.Run("cluster mode admits exactly what the contract admits", func(t *testing.T) {
		// The Lua scripts are the Go transitions' twins: in cluster mode every algorithm but the
		// weighted estimate admits exactly its ideal.
		for _, r := range rep.Results {
			if r.Mode == "cluster" && !estimate(rep, r.Algo) && (r.Admitted != r.Ideal || r.Under != 0) {
				t.Errorf("%s, %s: admitted %d, ideal %d, under %d", r.Trace, r.Algo, r.Admitted, r.Ideal, r.Under)
			}
		}
	})

	t.Run("local mode with the full limit on every node over-admits", func(t *testing.T) {
		for _, algo := range []string{"fixed_window", "sliding_log", "token_bucket", "leaky_bucket", "concurrency"} {
			r, _ := rep.Result("steady-200", algo, "local-full")
			if r.Over <= 0 || r.Admitted <= r.Ideal {
				t.Errorf("steady-200, %s, local-full: admitted %d, ideal %d, over %d: want over-admission", algo, r.Admitted, r.Ideal, r.Over)
			}
		}
	})

	t.Run("local mode with the limit split under-admits uneven traffic", func(t *testing.T) {
		for _, algo := range []string{"fixed_window", "sliding_log", "token_bucket"} {
			for _, trace := range []string{"uneven-60-20-10-10", "uneven-40-30-20-10"} {
				r, _ := rep.Result(trace, algo, "local-split")
				if r.Under <= 0 || r.Over != 0 {
					t.Errorf("%s, %s, local-split: under %d, over %d: want under-admission only", trace, algo, r.Under, r.Over)
				}
			}
		}
	})

	t.Run("batched mode calls Redis less than cluster mode", func(t *testing.T) {
		for _, algo := range []string{"fixed_window", "sliding_log"} {
			cl, _ := rep.Result("boundary", algo, "cluster")
			le, _ := rep.Result("boundary", algo, "batched")
			if cl.RedisCalls != cl.Offered {
				t.Errorf("boundary, %s, cluster: %d Redis calls for %d requests, want one each", algo, cl.RedisCalls, cl.Offered)
			}
			if le.RedisCalls == 0 || le.RedisCalls >= cl.RedisCalls {
				t.Errorf("boundary, %s: batched made %d Redis calls, cluster %d: want fewer", algo, le.RedisCalls, cl.RedisCalls)
			}
		}
		if r, _ := rep.Result("steady-100", "concurrency", "batched"); r.Skipped == "" {
			t.Error("batched mode ran the concurrency limit, which cannot be batched")
		}
	})

	t.Run("failover results split into phases that add up to the whole", func(t *testing.T) {
		for _, r := range rep.Results {
			if r.Mode != "failover" || r.Skipped != "" {
				continue
			}
			var sum Phase
			for _, p := range r.Phases {
				sum.Offered, sum.Admitted, sum.Ideal, sum.Over = sum.Offered+p.Offered, sum.Admitted+p.Admitted, sum.Ideal+p.Ideal, sum.Over+p.Over
			}
			if len(r.Phases) != 3 || sum.Offered != r.Offered || sum.Admitted != r.Admitted || sum.Ideal != r.Ideal || sum.Over != r.Over {
				t.Errorf("%s, %s: phases %+v do not add up to %+v", r.Trace, r.Algo, r.Phases, r)
			}
		}
	})

	t.Run("failover mode falls back during the outage", func(t *testing.T) {
		down := map[string]bool{} // traces with requests in the outage
		for _, tr := range rep.Traces {
			from, to := tr.Start+int64(StandardOutage[0]*float64(tr.End-tr.Start)), tr.Start+int64(StandardOutage[1]*float64(tr.End-tr.Start))
			for _, ev := range tr.Events {
				down[tr.Name] = down[tr.Name] || ev.At >= from && ev.At < to
			}
		}
		for _, r := range rep.Results {
			if r.Mode != "failover" || !down[r.Trace] {
				continue
			}
			c, _ := rep.Result(r.Trace, r.Algo, "cluster")
			if r.RedisCalls == 0 || r.RedisCalls >= c.RedisCalls {
				t.Errorf("%s, %s: failover made %d Redis calls, cluster %d: want fewer, none in the outage", r.Trace, r.Algo, r.RedisCalls, c.RedisCalls)
			}
		}
		// A third of the trace decided by each node alone, at its learned share of the traffic,
		// not knowing what Redis counted before: the exact algorithms are no longer exact.
		for _, algo := range []string{"fixed_window", "sliding_log", "token_bucket"} {
			r, _ := rep.Result("uneven-60-20-10-10", algo, "failover")
			if r.Under == 0 && r.Over == 0 {
				t.Errorf("uneven-60-20-10-10, %s, failover: exact (admitted %d of ideal %d), want an error from the outage", algo, r.Admitted, r.Ideal)
			}
		}
	})

	t.Run("the same seed gives the same report", func(t *testing.T) {
		again, err := Run(ctx, opts())
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(again.Results, rep.Results) || !reflect.DeepEqual(again.Wrong, rep.Wrong) ||
			!reflect.DeepEqual(again.Series, rep.Series) {
			t.Error("two runs with the same seed differ")
		}
		m := Machine{CPU: "test", Cores: 1}
		if a, b := NewData(m, "x", time.Second, again, nil).Markdown(), NewData(m, "x", time.Second, rep, nil).Markdown(); !bytes.Equal(a, b) {
			t.Error("two runs with the same seed write different reports")
		}
	})

	t.Run("charts are valid SVG", func(t *testing.T) {
		for ti := range rep.Traces {
			for _, svg := range [][]byte{rep.TimelineSVG(ti), rep.ErrorSVG(ti)} {
				checkSVG(t, svg)
			}
		}
	})

	t.Run("the report writes its files", func(t *testing.T) {
		dir := t.TempDir()
		d := NewData(Machine{CPU: "test <cpu>", Cores: 2, Go: "go", Redis: "7"}, "dianasim", time.Second, rep, nil)
		if err := WriteDir(dir, d, rep); err != nil {
			t.Fatal(err)
		}
		md := readFile(t, dir+"/accuracy.md")
		for _, want := range []string{"test <cpu>", "| fixed_window | local-full |", "img/accuracy-time-steady-100.svg", "false denies", "**failover**"} {
			if !strings.Contains(md, want) {
				t.Errorf("accuracy.md lacks %q", want)
			}
		}
		checkSVG(t, []byte(readFile(t, dir+"/img/accuracy-error-bursty.svg")))
		back, err := ReadData([]byte(readFile(t, dir+"/accuracy.json")))
		if err != nil {
			t.Fatal(err)
		}
		if got := back.Markdown(); string(got) != md {
			t.Error("accuracy.md rendered from accuracy.json differs from the one the run wrote")
		}
	})
}

// checkSVG parses svg as XML and checks its root element.
func checkSVG(t *testing.T, svg []byte) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(svg))
	root := ""
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("invalid XML: %v\n%s", err, svg)
		}
		if se, ok := tok.(xml.StartElement); ok && root == "" {
			root = se.Name.Space + " " + se.Name.Local
		}
	}
	if root != "http://www.w3.org/2000/svg svg" {
		t.Errorf("root element %q, want svg in the SVG namespace", root)
	}
}

// estimate reports whether rep's algorithm name is an estimate (Algo.Estimate).
func estimate(rep *Report, name string) bool {
	for _, a := range rep.Algos {
		if a.Name == name {
			return a.Estimate
		}
	}
	return false
}

func TestRunNeedsKeyLife(t *testing.T) {
	_, err := Run(context.Background(), Options{Limit: smallLimit, Traces: smallTraces(t, 1)[:1], Modes: []Mode{Cluster(nil)}})
	if err == nil || !strings.Contains(err.Error(), "KeyLife") {
		t.Errorf("a Redis mode without Options.KeyLife: err %v, want one naming KeyLife", err)
	}
}

func TestSVGWriterEscapes(t *testing.T) {
	g := newSVG(100, 50)
	g.text(1, 2, "start", 12, "bold", -90, `a <b> & "c"`)
	g.line(0, 0, 1, 1, `#000"/><script/>`, 1, "4 2")
	g.polyline([]float64{0, 1}, []float64{2, 3}, "red", 1, "")
	g.rectAlpha(0, 0, -5, -5, "blue", 0.5)
	out := g.bytes()
	checkSVG(t, out)
	if bytes.Contains(out, []byte("<script")) {
		t.Errorf("an attribute was not escaped:\n%s", out)
	}
}

func TestTicks(t *testing.T) {
	cases := []struct {
		lo, hi float64
		n      int
		want   []float64
	}{
		{0, 100, 5, []float64{0, 20, 40, 60, 80, 100}},
		{0, 4, 8, []float64{0, 0.5, 1, 1.5, 2, 2.5, 3, 3.5, 4}},
		{-40, 0, 3, []float64{-40, -20, 0}},
		{0, 0, 5, []float64{0}},
	}
	for _, c := range cases {
		if got := ticks(c.lo, c.hi, c.n); !reflect.DeepEqual(got, c.want) {
			t.Errorf("ticks(%v, %v, %d) = %v, want %v", c.lo, c.hi, c.n, got, c.want)
		}
	}
	if got := niceMax(263, 4); got != 300 {
		t.Errorf("niceMax(263, 4) = %v, want 300", got)
	}
	if got := fmtTick(-0.0 * 1); got != "0" {
		t.Errorf("fmtTick(-0) = %q", got)
	}
}

// TestWrongDecisions checks the count on a trace worked out by hand: 2 per 10s.
func TestWrongDecisions(t *testing.T) {
	const s = algos.Second
	at := func(key int32, sec float64) Event { return Event{At: start + int64(sec*float64(s)), Key: key} }
	evs := []Event{
		at(0, 0),    // allowed by both
		at(0, 1),    // allowed by both: 2 in the window
		at(0, 2),    // denied by both
		at(1, 8),    // key 1: allowed by both
		at(1, 9),    // allowed by both
		at(0, 10.5), // estimate 2·0.95 = 1.9 + 1 > 2: denied; the log holds only t=1 in (0.5, 10.5]: FALSE DENY
		at(0, 15),   // estimate 2·0.5 = 1: allowed; nothing in (5, 15]: allowed
		at(1, 15),   // estimate 2·0.5 = 1: allowed; but t=8 and 9 are in (5, 15]: FALSE ALLOW
		at(0, 19),   // estimate 2·0.1 + 1 = 1.2: denied; only t=15 in (9, 19]: FALSE DENY
	}
	// Over 20s, client 0 sends 6 requests (3 per 10s, 150% of the limit), client 1 three (75%).
	tr := &Trace{Name: "hand", Keys: 2, Start: start, End: start + 20*s, Events: evs}
	sw, err := algos.NewSlidingWindow(2, 10*s)
	if err != nil {
		t.Fatal(err)
	}
	meter, err := algos.NewSlidingWindow(algos.MaxCount, 10*s)
	if err != nil {
		t.Fatal(err)
	}
	w, err := wrongDecisions(tr, sw, meter, 2, 10*s)
	if err != nil {
		t.Fatal(err)
	}
	// Cloudflare's measure, every request counted: client 0 at 15 s is over by the estimate
	// (3·0.5 + 1 + 1 = 3.5) but not by the exact count (10.5 and 15 in (5, 15]); client 1 at 15 s
	// is not over by the estimate (2·0.5 + 0 + 1 = 2) but is by the exact count (8, 9 and 15).
	want := Wrong{Trace: "hand", Requests: 9, FalseAllows: 1, FalseDenies: 2, Meter: 2, Bands: []Band{
		{Lo: 0, Hi: 50},
		{Lo: 50, Hi: 150, Clients: 1, Requests: 3, FalseAllows: 1, Meter: 1},
		{Lo: 150, Clients: 1, Requests: 6, FalseDenies: 2, Meter: 1},
	}}
	if !reflect.DeepEqual(w, want) {
		t.Errorf("got %+v, want %+v", w, want)
	}
	if r := w.Rate(); r < 33.33 || r > 33.34 {
		t.Errorf("rate %v%%, want 33.3%%", r)
	}
}

// TestMeasure checks the figures of one run worked out by hand: a fixed window of 2 per 10s.
func TestMeasure(t *testing.T) {
	const s = algos.Second
	tr := &Trace{Name: "hand", Nodes: 1, Keys: 2, Start: start, End: start + 20*s}
	for _, e := range []struct {
		key int32
		sec int64
	}{{0, 0}, {0, 1}, {0, 2}, {1, 3}, {0, 11}, {0, 12}, {0, 13}} {
		tr.Events = append(tr.Events, Event{At: start + e.sec*s, Key: e.key})
	}
	a := Algorithms(Limit{Units: 2, Window: 10 * s}, s)[0] // fixed_window
	admitted := []bool{true, true, true, true, true, true, false}
	ideal := []bool{true, true, false, true, true, true, false}
	var r Result
	if err := measure(&r, tr, a, nil, admitted, ideal); err != nil {
		t.Fatal(err)
	}
	want := Result{Offered: 7, Admitted: 6, Ideal: 5, Over: 1, MaxExcess: 1, Under: 0, Peak: 3}
	if !reflect.DeepEqual(r, want) {
		t.Errorf("got %+v, want %+v", r, want)
	}

	// Under-admission counts per client: client 1 denied does not offset client 0's excess.
	admitted[3] = false
	r = Result{}
	if err := measure(&r, tr, a, nil, admitted, ideal); err != nil {
		t.Fatal(err)
	}
	if r.Over != 1 || r.Under != 1 {
		t.Errorf("over %d, under %d: want 1 and 1", r.Over, r.Under)
	}
}

// TestPhases checks the split of TestMeasure's run by an outage from 2s to 12s: before it,
// events at 0s and 1s; during it, 2s, 3s and 11s; after it, 12s and 13s.
func TestPhases(t *testing.T) {
	const s = algos.Second
	tr := &Trace{Name: "hand", Nodes: 1, Keys: 2, Start: start, End: start + 20*s}
	for _, e := range []struct {
		key int32
		sec int64
	}{{0, 0}, {0, 1}, {0, 2}, {1, 3}, {0, 11}, {0, 12}, {0, 13}} {
		tr.Events = append(tr.Events, Event{At: start + e.sec*s, Key: e.key})
	}
	a := Algorithms(Limit{Units: 2, Window: 10 * s}, s)[0] // fixed_window
	admitted := []bool{true, true, true, false, true, true, true}
	ideal := []bool{true, true, false, true, true, true, false}
	var r Result
	if err := measure(&r, tr, a, [][2]int64{{start + 2*s, start + 12*s}}, admitted, ideal); err != nil {
		t.Fatal(err)
	}
	// The contract denies the admitted 2s (third in its window) and 13s (third in the next).
	want := []Phase{
		{Name: "before", Offered: 2, Admitted: 2, Ideal: 2},
		{Name: "during", Offered: 3, Admitted: 2, Ideal: 2, Over: 1, Under: 1}, // client 1 lost its request
		{Name: "after", Offered: 2, Admitted: 2, Ideal: 1, Over: 1},
	}
	if !reflect.DeepEqual(r.Phases, want) {
		t.Errorf("phases %+v, want %+v", r.Phases, want)
	}
	for at, ph := range map[int64]int{0: phaseBefore, 2: phaseDuring, 11: phaseDuring, 12: phaseAfter, 13: phaseAfter} {
		if got := phaseOf(start+at*s, [][2]int64{{start + 2*s, start + 12*s}}); got != ph {
			t.Errorf("phaseOf(%ds) = %d, want %d", at, got, ph)
		}
	}
	two := [][2]int64{{10, 20}, {30, 40}}
	for at, ph := range map[int64]int{9: phaseBefore, 10: phaseDuring, 25: phaseAfter, 35: phaseDuring, 40: phaseAfter} {
		if got := phaseOf(at, two); got != ph {
			t.Errorf("two outages: phaseOf(%d) = %d, want %d", at, got, ph)
		}
	}
}

func TestMaxInFlight(t *testing.T) {
	evs := []Event{{At: 0}, {At: 5}, {At: 10}, {At: 10, Key: 1}}
	// A release at t comes before an arrival at t; clients are counted apart.
	for hold, want := range map[int64]int64{5: 1, 6: 2, 11: 3} {
		if got := maxInFlight(evs, hold); got != want {
			t.Errorf("maxInFlight(hold %d) = %d, want %d", hold, got, want)
		}
	}
}

func TestTraces(t *testing.T) {
	a, b := smallTraces(t, 1), smallTraces(t, 1)
	if !reflect.DeepEqual(a, b) {
		t.Error("the same seed gave different traces")
	}
	if c := smallTraces(t, 2); reflect.DeepEqual(a[0].Events, c[0].Events) {
		t.Error("two seeds gave the same trace")
	}
	names := map[string]bool{}
	for _, tr := range a {
		names[tr.Name] = true
		if len(tr.Events) == 0 {
			t.Errorf("%s: no events", tr.Name)
		}
		for i, ev := range tr.Events {
			if ev.At < tr.Start || ev.At >= tr.End || ev.Node < 0 || int(ev.Node) >= tr.Nodes || ev.Key < 0 || int(ev.Key) >= tr.Keys ||
				i > 0 && ev.At < tr.Events[i-1].At {
				t.Fatalf("%s: event %d %+v out of order or range", tr.Name, i, ev)
			}
		}
	}
	for _, n := range []string{"steady-50", "steady-100", "steady-200", "bursty", "boundary", "many-clients", "uneven-60-20-10-10", "uneven-40-30-20-10",
		"outage-mid-window", "two-outages", "pareto-clients"} {
		if !names[n] {
			t.Errorf("no trace %s", n)
		}
	}
	for _, bad := range []TraceOptions{
		{Limit: Limit{Units: 0, Window: 1}},
		{Limit: Limit{Units: 1, Window: 0}},
		{Limit: smallLimit, Nodes: 65},
		{Limit: smallLimit, Length: 1},
	} {
		if _, err := Traces(bad); err == nil {
			t.Errorf("Traces(%+v): no error", bad)
		}
	}
}

func TestMainFlags(t *testing.T) {
	cases := []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"-nodes", "0"}, 2, "-nodes must be between 1 and 64"},
		{[]string{"-parallel", "0"}, 2, "-parallel must be at least 1"},
		{[]string{"-pareto-clients", "0"}, 2, "-pareto-clients must be at least 1"},
		{[]string{"extra"}, 2, `unexpected argument "extra"`},
		{[]string{"-bogus"}, 2, "flag provided but not defined"},
		{[]string{"-redis", "127.0.0.1:1"}, 1, "Redis at 127.0.0.1:1"},
	}
	for _, c := range cases {
		var out, errOut bytes.Buffer
		if code := Main(context.Background(), c.args, &out, &errOut); code != c.code || !strings.Contains(errOut.String(), c.msg) {
			t.Errorf("Main(%q) = %d, %q; want %d and %q", c.args, code, errOut.String(), c.code, c.msg)
		}
	}
}

func TestStartRedis(t *testing.T) {
	addr, stop, err := StartRedis(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Errorf("addr %q", addr)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestCommittedReport checks that the committed report is data first: docs/accuracy.md is what
// docs/accuracy.json renders to, and the README quotes exactly what it derives, so that no
// figure of the prose can drift from the data (make report rewrites all three).
func TestCommittedReport(t *testing.T) {
	js := readFile(t, "../docs/accuracy.json")
	d, err := ReadData([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	again, err := d.JSON()
	if err != nil {
		t.Fatal(err)
	}
	if string(again) != js {
		t.Error("docs/accuracy.json does not read back to itself: a field is lost or renamed (run make report)")
	}
	if got := string(d.Markdown()); got != readFile(t, "../docs/accuracy.md") {
		t.Error("docs/accuracy.md is not what docs/accuracy.json renders to (run make report, and do not edit accuracy.md by hand)")
	}
	readme := readFile(t, "../README.md")
	quoted, err := ReplaceQuotes([]byte(readme), d.Quotes())
	if err != nil {
		t.Fatal(err)
	}
	if string(quoted) != readme {
		t.Error("README.md's quotes of the accuracy report differ from what docs/accuracy.json derives (run make report)")
	}
	// Every chart the report links exists.
	for _, tr := range d.Main.Traces {
		for _, kind := range []string{"time", "error"} {
			if _, err := os.Stat("../docs/img/accuracy-" + kind + "-" + tr.Name + ".svg"); err != nil {
				t.Error(err)
			}
		}
	}
}

func TestReplaceQuotes(t *testing.T) {
	in := "a\n<!-- make report: x -->\nold\n<!-- end: x -->\nb\n"
	got, err := ReplaceQuotes([]byte(in), map[string][]byte{"x": []byte("new\n")})
	if err != nil || string(got) != "a\n<!-- make report: x -->\nnew\n<!-- end: x -->\nb\n" {
		t.Errorf("got %q, %v", got, err)
	}
	if _, err := ReplaceQuotes([]byte(in), map[string][]byte{"y": nil}); err == nil {
		t.Error("a quote without markers: no error")
	}
	if _, err := ReplaceQuotes([]byte(in), map[string][]byte{}); err == nil {
		t.Error("markers without a quote: no error")
	}
}

func TestParetoRate(t *testing.T) {
	// The law is scaled so that a share paretoAbove of clients is above the limit.
	if r := paretoRate(1 - paretoAbove); math.Abs(r-1) > 1e-9 {
		t.Errorf("paretoRate at the quantile 1 − %g = %g, want 1 (the limit)", paretoAbove, r)
	}
	if r := paretoRate(1 - 1e-12); r != paretoCap {
		t.Errorf("paretoRate near 1 = %g, want the cap %g", r, paretoCap)
	}
	if lo, hi := paretoRate(0), paretoRate(0.5); !(lo > 0 && lo < hi && hi < 1) {
		t.Errorf("paretoRate(0) = %g, paretoRate(0.5) = %g: want 0 < lo < hi < 1", lo, hi)
	}
}

// slowed delays every decision of s by d of real time: a machine far slower than the virtual
// time of the trace it replays.
type slowed struct {
	s rules.Store
	d time.Duration
}

func (w slowed) Decide(ctx context.Context, ops []*rules.Op) {
	time.Sleep(w.d)
	w.s.Decide(ctx, ops)
}

// TestSlowMachine replays a trace far slower than its virtual time passes, each call taking
// longer than the state's virtual TTL, and checks that the results are those of a fast replay
// and of the contract: a busy machine makes the report slower, never different. (A key that
// expired on Redis's clock in the middle of the run would forget the requests before it.)
func TestSlowMachine(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	keyLife, err := KeyLife(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	const ms = algos.Millisecond
	l := Limit{Units: 3, Window: 10 * ms} // state lives about 10ms of virtual time
	tr := &Trace{Name: "hand", Nodes: 2, Keys: 1, Start: start, End: start + 40*ms, Hold: 2 * ms}
	for i := range int64(16) {
		tr.Events = append(tr.Events, Event{At: start + i*5*ms/2, Node: int32(i % 2)})
	}
	slow := Cluster(c)
	slow.Name = "slow-cluster"
	inner := slow.Stores
	slow.Stores = func(run string, t *Trace, now func() int64, calls *Calls) ([]rules.Store, error) {
		ss, err := inner(run, t, now, calls)
		for i := range ss {
			ss[i] = slowed{ss[i], 25 * time.Millisecond} // 10× the 2.5ms between requests
		}
		return ss, err
	}
	began := time.Now()
	rep, err := Run(ctx, Options{Limit: l, Traces: []*Trace{tr}, Modes: []Mode{Cluster(c), slow}, KeyLife: keyLife,
		Algos: Algorithms(l, 2*ms)})
	if err != nil {
		t.Fatal(err)
	}
	if real := time.Since(began); real < 40*time.Millisecond {
		t.Fatalf("the slow replay took %s, not slower than the 40ms of virtual time", real)
	}
	for _, a := range rep.Algos {
		fast, _ := rep.Result("hand", a.Name, "cluster")
		got, _ := rep.Result("hand", a.Name, "slow-cluster")
		got.Mode = fast.Mode
		if !reflect.DeepEqual(got, fast) {
			t.Errorf("%s: slow replay %+v, fast replay %+v", a.Name, got, fast)
		}
		if !a.Estimate && (got.Admitted != got.Ideal || got.Over != 0) {
			t.Errorf("%s: slow replay admitted %d, over %d; the contract admits %d", a.Name, got.Admitted, got.Over, got.Ideal)
		}
	}
}
