package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// SchemaVersion is the version of accuracy.json's layout: a field renamed, removed or given
// another meaning bumps it; a field added does not.
const SchemaVersion = 1

// Data is everything the accuracy report states, written as accuracy.json by the run that
// measured it. accuracy.md and the README's quotes of it are rendered from Data alone
// (Data.Markdown, Data.Quotes), so that no figure of the prose is typed by hand.
type Data struct {
	Schema  int     `json:"schema"`
	Command string  `json:"command"` // the command line that made the report
	Seed    uint64  `json:"seed"`
	Machine Machine `json:"machine"`
	// ElapsedSeconds is the run's wall time: with Machine, the only figures that depend on
	// the machine; every other one is the same for the same seed on any machine.
	ElapsedSeconds float64      `json:"elapsed_seconds"`
	Definitions    []Definition `json:"definitions"`
	// Main is the report's run: every trace through every algorithm in every mode.
	Main Section `json:"main"`
	// HotKey is the batched-mode run on one hot key (RunScale), if any.
	HotKey *Section `json:"hot_key,omitempty"`
}

// Machine describes where a report was made.
type Machine struct {
	CPU   string `json:"cpu"` // model name
	Cores int    `json:"cores"`
	OS    string `json:"os"`    // GOOS/GOARCH
	Go    string `json:"go"`    // Go version
	Redis string `json:"redis"` // Redis server version
}

// Definition states what a figure of the report means.
type Definition struct {
	Name string `json:"name"`
	Text string `json:"text"`
}

// Section is one run (Run): its configuration and every figure of every trace × algorithm ×
// mode.
type Section struct {
	Limit      LimitData     `json:"limit"`
	Nodes      int           `json:"nodes"`
	Batch      *BatchOptions `json:"batch,omitempty"` // batched mode's batch block
	Algorithms []AlgoData    `json:"algorithms"`
	Modes      []ModeData    `json:"modes"`
	Traces     []TraceData   `json:"traces"`
	// EstimateTraces are traces on which only the estimates' wrong decisions are measured.
	EstimateTraces []TraceData  `json:"estimate_traces,omitempty"`
	Results        []ResultData `json:"results"` // for each trace, each algorithm, each mode, in that order
	Wrong          []Wrong      `json:"wrong_decisions"`
	index          map[[3]string]int
	algoByName     map[string]AlgoData
}

// LimitData is a Limit: Units per WindowMicros, per client.
type LimitData struct {
	Units        int64 `json:"units"`
	WindowMicros int64 `json:"window_us"`
}

// AlgoData describes an algorithm under test.
type AlgoData struct {
	Name  string `json:"name"`
	About string `json:"about"`
	// Estimate: the algorithm approximates its contract, the exact sliding log (Algo.Estimate).
	Estimate bool `json:"estimate"`
	InFlight bool `json:"in_flight"`
}

// ModeData describes a deployment mode.
type ModeData struct {
	Name  string `json:"name"`
	About string `json:"about"`
	// Outage is when Redis cannot be reached, in fractions of each trace's span (Mode.Outage).
	Outage *[2]float64 `json:"outage,omitempty"`
}

// TraceData describes a trace.
type TraceData struct {
	Name     string `json:"name"`
	About    string `json:"about"`
	Requests int64  `json:"requests"`
	Clients  int    `json:"clients"`
	Nodes    int    `json:"nodes"`
	Micros   int64  `json:"duration_us"`
	// Outages are the trace's own outages (Trace.Outages), µs from its start.
	Outages [][2]int64 `json:"outages_us,omitempty"`
}

// ResultData is a Result with its derived figures, written out so that readers of the JSON need
// not recompute them (the report recomputes them from the counts).
type ResultData struct {
	Result
	OverPct          float64 `json:"over_pct"`
	UnderPct         float64 `json:"under_pct"`
	CallsPerAdmitted float64 `json:"redis_calls_per_admitted"`
}

// Section returns r's configuration and figures.
func (r *Report) Section() Section {
	s := Section{Limit: LimitData{r.Limit.Units, r.Limit.Window}, Batch: r.Batch}
	if len(r.Traces) > 0 {
		s.Nodes = r.Traces[0].Nodes
	}
	for _, a := range r.Algos {
		s.Algorithms = append(s.Algorithms, AlgoData{Name: a.Name, About: a.About, Estimate: a.Estimate, InFlight: a.InFlight})
	}
	for _, m := range r.Modes {
		s.Modes = append(s.Modes, ModeData{Name: m.Name, About: m.About, Outage: m.Outage})
	}
	info := func(t *Trace) TraceData {
		d := TraceData{Name: t.Name, About: t.About, Requests: int64(len(t.Events)), Clients: t.Keys, Nodes: t.Nodes, Micros: t.End - t.Start}
		for _, o := range t.Outages {
			d.Outages = append(d.Outages, [2]int64{o[0] - t.Start, o[1] - t.Start})
		}
		return d
	}
	for _, t := range r.Traces {
		s.Traces = append(s.Traces, info(t))
	}
	for _, t := range r.EstimateTraces {
		s.EstimateTraces = append(s.EstimateTraces, info(t))
	}
	for _, x := range r.Results {
		s.Results = append(s.Results, ResultData{Result: x, OverPct: x.OverPct(), UnderPct: x.UnderPct(), CallsPerAdmitted: x.CallsPerAdmitted()})
	}
	s.Wrong = r.Wrong
	return s
}

// NewData returns the data of a report: main, and hot (RunScale's run) if not nil.
func NewData(m Machine, command string, elapsed time.Duration, main, hot *Report) *Data {
	d := &Data{Schema: SchemaVersion, Command: command, Seed: main.Seed, Machine: m,
		ElapsedSeconds: elapsed.Round(100 * time.Millisecond).Seconds(), Main: main.Section()}
	if hot != nil {
		s := hot.Section()
		d.HotKey = &s
	}
	d.Definitions = definitions(d.Main.Limit.WindowMicros)
	return d
}

// definitions states the figures of the report, for a window of w µs.
func definitions(w int64) []Definition {
	win := duration(w)
	return []Definition{
		{"ideal", "what the algorithm's contract admits of the offered requests: an exact reference limiter that sees every request of a client, in order, in one place. " +
			"The contract is the algorithm itself run on one state per client (the Go transition of shared/algos, which the Lua scripts match exactly), " +
			"except for an estimate (the weighted sliding window), whose contract is what it approximates: the exact sliding log of the same limit. " +
			"So the token bucket is judged by the GCRA contract, the fixed window by its own aligned windows, the concurrency limit by the exact count in flight."},
		{"over", "over-admission: the admitted requests the contract denies when only the admitted requests are replayed through it; " +
			"over_max is the most of them for one client in one window of " + win + " (aligned windows for the fixed window, any sliding window otherwise; " +
			"for the concurrency limit, the most requests in flight beyond the limit at one instant)."},
		{"under", "under-admission: the sum over clients of ideal − admitted, where positive (one client's excess does not offset another's shortfall)."},
		{"over_pct, under_pct", "over and under as a percentage of ideal."},
		{"peak", "the most requests admitted for one client in any sliding window of " + win + " (the concurrency limit: the most in flight at once): " +
			"it shows the fixed window's burst at a window boundary, which its own contract allows."},
		{"redis_calls", "script calls sent to Redis (cluster: one per request, admitted or not; batched: one per batch or per request decided directly; " +
			"failover: none while Redis is unreachable, and the exchange of shares, one script call per node per second while Redis answers, is not counted); " +
			"redis_calls_per_admitted divides them by the admitted requests."},
		{"wrong decisions", "the limiter's own measure of an estimate: each request is decided by the estimate (one state per client) and judged by the exact sliding log " +
			"holding the same history (the requests the estimate admitted before it). A false allow is a request admitted that the log denies; a false deny, " +
			"one denied that the log admits; the wrong share is (false allows + false denies) / requests. Bands split them by the client's offered rate over the trace, " +
			"in % of the limit."},
		{"meter_wrong", "Cloudflare's measure (its 2017 blog's \"wrongly allowed or rate limited\", 0.003% of 400 million requests): its counter counts every request " +
			"of a client, admitted or not, so each request is wrong when the estimate over all the client's requests and the exact count of them, the request included, " +
			"disagree on whether they exceed the limit; over every request."},
	}
}

// JSON returns d as indented JSON, ending in a newline.
func (d *Data) JSON() ([]byte, error) {
	b, err := json.MarshalIndent(d, "", " ")
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	return append(b, '\n'), nil
}

// ReadData reads accuracy.json.
func ReadData(b []byte) (*Data, error) {
	var d Data
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&d); err != nil {
		return nil, fmt.Errorf("sim: accuracy.json: %w", err)
	}
	if d.Schema != SchemaVersion {
		return nil, fmt.Errorf("sim: accuracy.json has schema %d, this reader knows %d", d.Schema, SchemaVersion)
	}
	return &d, nil
}

// WriteDir writes dir/accuracy.json, dir/accuracy.md (rendered from it) and the charts of
// charts, dir/img/accuracy-time-TRACE.svg and dir/img/accuracy-error-TRACE.svg, creating the
// directories.
func WriteDir(dir string, d *Data, charts *Report) error {
	img := filepath.Join(dir, "img")
	if err := os.MkdirAll(img, 0o755); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	for ti, t := range charts.Traces {
		for _, f := range []struct {
			name string
			data []byte
		}{{"accuracy-time-" + t.Name + ".svg", charts.TimelineSVG(ti)}, {"accuracy-error-" + t.Name + ".svg", charts.ErrorSVG(ti)}} {
			if err := os.WriteFile(filepath.Join(img, f.name), f.data, 0o644); err != nil {
				return fmt.Errorf("sim: %w", err)
			}
		}
	}
	js, err := d.JSON()
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "accuracy.json"), js, 0o644); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "accuracy.md"), d.Markdown(), 0o644); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	return nil
}

// Result returns the result of trace, algo and mode, if the section has one.
func (s *Section) Result(trace, algo, mode string) (Result, bool) {
	if s.index == nil {
		s.index = map[[3]string]int{}
		for i, x := range s.Results {
			s.index[[3]string{x.Trace, x.Algo, x.Mode}] = i
		}
	}
	i, ok := s.index[[3]string{trace, algo, mode}]
	if !ok {
		return Result{}, false
	}
	return s.Results[i].Result, true
}

// Algo returns the algorithm named name.
func (s *Section) Algo(name string) AlgoData {
	if s.algoByName == nil {
		s.algoByName = map[string]AlgoData{}
		for _, a := range s.Algorithms {
			s.algoByName[a.Name] = a
		}
	}
	return s.algoByName[name]
}

func (s *Section) hasMode(name string) bool {
	for _, m := range s.Modes {
		if m.Name == name {
			return true
		}
	}
	return false
}

// Quotes returns what the README quotes of the report, by name: each replaces the text between
// the README's lines "<!-- make report: NAME -->" and "<!-- end: NAME -->" (ReplaceQuotes).
func (d *Data) Quotes() map[string][]byte {
	q := map[string][]byte{}
	var b bytes.Buffer
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	s := &d.Main
	names := make([]string, len(s.Traces))
	for i, t := range s.Traces {
		names[i] = t.Name
	}
	modes := make([]string, len(s.Modes))
	for i, m := range s.Modes {
		modes[i] = m.Name
	}
	p("**Accuracy report** ([docs/accuracy.md](docs/accuracy.md), `make report`; every figure in [docs/accuracy.json](docs/accuracy.json), ")
	p("in virtual time, so the same on any machine): %d traces (%s) through every algorithm on %d nodes, in modes %s, against each algorithm's exact contract.\n\n",
		len(names), strings.Join(names, ", "), s.Nodes, strings.Join(modes, ", "))
	for _, f := range d.findings() {
		p("- %s\n", f)
	}
	p("\n![admitted vs offered over time, steady-200](docs/img/accuracy-time-steady-200.svg)\n")
	p("![error per mode, %s](docs/img/accuracy-error-%s.svg)\n", traceHeavy, traceHeavy)
	q["accuracy"] = bytes.Clone(b.Bytes())

	if h := d.HotKey; h != nil {
		b.Reset()
		p("| %d per %s, one key, %d nodes |", h.Limit.Units, duration(h.Limit.WindowMicros), h.Nodes)
		for _, a := range h.Algorithms {
			p(" %s |", a.Name)
		}
		p("\n| --- |%s\n", strings.Repeat(" ---: |", len(h.Algorithms)))
		for _, t := range h.Traces {
			p("| %s: Redis calls, × fewer than cluster mode |", t.Name)
			for _, a := range h.Algorithms {
				if c, l, ok := h.pair(t.Name, a.Name); ok {
					p(" %s |", ratio(c.RedisCalls, l.RedisCalls))
				} else {
					p(" – |")
				}
			}
			p("\n")
		}
		for _, row := range []struct {
			label string
			mode  string
			f     func(Result) float64
			sign  string
		}{
			{"batched over-admission, largest of these traces", "batched", Result.OverPct, "+"},
			{"cluster over-admission, largest of these traces", "cluster", Result.OverPct, "+"},
			{"batched under-admission, largest of these traces", "batched", Result.UnderPct, "−"},
		} {
			p("| %s |", row.label)
			for _, a := range h.Algorithms {
				x, _ := h.worst(row.mode, func(x Result) bool { return x.Algo == a.Name }, row.f)
				if v := row.f(x); v > 0 {
					p(" %s%.1f%% (%s) |", row.sign, v, x.Trace)
				} else {
					p(" 0 |")
				}
			}
			p("\n")
		}
		q["hot-key"] = bytes.Clone(b.Bytes())
	}
	return q
}

// ReplaceQuotes returns readme with the text between each "<!-- make report: NAME -->" line and
// the next "<!-- end: NAME -->" line replaced by quotes[NAME]; every quote must have its
// markers, and every marker a quote.
func ReplaceQuotes(readme []byte, quotes map[string][]byte) ([]byte, error) {
	out := bytes.Clone(readme)
	seen := 0
	for name, q := range quotes {
		begin, end := []byte("<!-- make report: "+name+" -->\n"), []byte("<!-- end: "+name+" -->\n")
		i := bytes.Index(out, begin)
		if i < 0 {
			return nil, fmt.Errorf("sim: the README has no line %q", bytes.TrimSpace(begin))
		}
		i += len(begin)
		j := bytes.Index(out[i:], end)
		if j < 0 {
			return nil, fmt.Errorf("sim: the README has no line %q after %q", bytes.TrimSpace(end), bytes.TrimSpace(begin))
		}
		out = append(out[:i:i], append(bytes.Clone(q), out[i+j:]...)...)
		seen++
	}
	if n := bytes.Count(out, []byte("<!-- make report: ")); n != seen {
		return nil, fmt.Errorf("sim: the README has %d quotes of the report, the report makes %d", n, seen)
	}
	return out, nil
}
