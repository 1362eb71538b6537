// Package faultmatrix runs Diana's fault matrix for the front ends' tests: each front end
// (dianad, the Kong plugin) is run under load while its Redis fails in each way of Faults, once
// per fail policy (open, closed, local), and what the clients saw is checked and measured.
//
// A front end supplies only how to start its nodes and send one request (FrontEnd); this
// package supplies the real Redis and its faults, the load, the checks and the report.
//
// Run runs a reduced matrix by default (every fault under fail-open, and the other policies
// under one degrading fault each) and the full one when DIANA_FAULTS=full or DIANA_FAULTS_OUT
// is set; with DIANA_FAULTS_OUT=file.md it appends the measured table to that file.
package faultmatrix

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The load every cell runs, and what the front end must limit it to.
const (
	// Limit is the limit of each client IP: a fixed window so long that no run crosses it.
	Limit = 30
	// Window is Limit's window, as a config duration.
	Window = "3650d"
	// Nodes is the number of nodes of the front end in every cell, and the node count the
	// local policy divides the limit by: each node may admit Limit/Nodes per client.
	Nodes = 3
	// Workers is the number of requests each node has in flight (one goroutine each).
	Workers = 2
	// Clients is the number of client IPs of each phase: the load goes round them, so that
	// each is offered far more than Limit.
	Clients = 4
)

// The phases of a cell.
const (
	baseline = iota // Redis healthy
	faulty          // from the fault's start to its end
	after           // from the fault's end to the end of the cell
	nPhases
)

// Timings of a cell: short, so that the matrix stays fast, yet long enough for the breaker
// (3 failures, 50ms timeout) to open during a fault.
const (
	baselineFor = 300 * time.Millisecond
	holdFor     = 700 * time.Millisecond // how long a lasting fault lasts
	afterFor    = 100 * time.Millisecond // load kept after recovery
	// recoverWithin is the generous bound on recovery. The breaker's probes come 1s, 3s, 7s
	// and 15s after it opened (the open period doubles after each failed probe): 20s leaves
	// room for a few probes that miss the 50ms timeout on a busy machine.
	recoverWithin = 20 * time.Second
)

// Target is the Redis that a front end's nodes decide in during one cell.
type Target struct {
	Addrs      []string // host:port
	MasterName string   // set when Addrs are Sentinels
}

// Outcome is what the client of one request got.
type Outcome struct {
	// Status is the HTTP status the client got: 200 when the request passed.
	Status int
	// Redis reports whether Redis decided (the response carries RateLimit headers, which a
	// fail policy never writes).
	Redis bool
	// Err is set when the request got no answer at all (a broken connection): the client would
	// see a 5xx from the gateway.
	Err error
}

// Worker sends requests from one goroutine of the load.
type Worker struct {
	Node int                           // 0 ≤ Node < Nodes
	Send func(clientIP string) Outcome // one request from clientIP; called by one goroutine
}

// FrontEnd is the front end under test.
type FrontEnd struct {
	Name string
	// Start starts Nodes nodes that limit each client IP to Limit requests per Window (a
	// fixed window) in cluster mode in target, with the fail policy policy ("open", "closed",
	// or "local" with nodes = Nodes) and the default Redis timeout and breaker, and returns
	// Workers workers per node. What it starts must end when t ends.
	Start func(t *testing.T, target Target, policy string) []Worker
}

// Policies are the fail policies, in the order of the table.
var Policies = []string{"open", "closed", "local"}

// Row is one measured cell: a front end under one fault with one policy.
type Row struct {
	FrontEnd, Fault, Policy string
	// Lasted is the fault's duration: from its start to its end.
	Lasted time.Duration
	// Sent and Answered count the requests sent during the fault, and those answered with a
	// decision (not a 5xx, not a broken connection).
	Sent, Answered int
	// Failed counts the 5xx and broken connections of the whole cell (baseline, fault, after).
	Failed int
	// ByPolicy counts the requests sent during the fault that the fail policy decided.
	ByPolicy int
	// BaselineP99 and FaultP99 are the 99th percentiles of decision latency before and during
	// the fault.
	BaselineP99, FaultP99 time.Duration
	// Recovery is the time from the fault's end to the end of the first decision made by
	// Redis again; -1 if none came within the bound.
	Recovery time.Duration
	// Admitted counts the requests sent during the fault that passed, and Over those beyond
	// Limit per client (all nodes together; the fault's clients are new when it starts).
	Admitted, Over int
}

// Run runs the fault matrix on fe, one subtest per cell ("fault/policy"), and appends the table
// to the file named by DIANA_FAULTS_OUT when it is set.
func Run(t *testing.T, fe FrontEnd) {
	out := os.Getenv("DIANA_FAULTS_OUT")
	if out != "" && !filepath.IsAbs(out) {
		t.Fatalf("DIANA_FAULTS_OUT=%s: must be an absolute path (go test runs each package in its own directory)", out)
	}
	full := os.Getenv("DIANA_FAULTS") == "full" || out != ""
	var rows []Row
	for _, f := range Faults() {
		for _, p := range Policies {
			if !full && !f.reduced(p) {
				continue
			}
			t.Run(f.Name+"/"+p, func(t *testing.T) {
				row := runCell(t, fe, f, p)
				rows = append(rows, row)
				t.Logf("%+v", row)
			})
		}
	}
	if out == "" {
		return
	}
	if err := appendTable(out, fe.Name, rows); err != nil {
		t.Errorf("writing the report: %v", err)
	}
}

// sample is one request of the load.
type sample struct {
	node, phase, client int
	start               time.Time
	took                time.Duration
	out                 Outcome
}

func (s *sample) end() time.Time { return s.start.Add(s.took) }

// recorder collects the samples of a cell, and tells when Redis decides again after the fault.
type recorder struct {
	mu        sync.Mutex
	samples   []sample
	healedAt  time.Time     // zero until the fault ended
	recovered chan struct{} // closed by the first Redis decision that ended after healedAt
}

func (r *recorder) add(s sample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.samples = append(r.samples, s)
	if s.out.Redis && !r.healedAt.IsZero() && s.end().After(r.healedAt) {
		select {
		case <-r.recovered:
		default:
			close(r.recovered)
		}
	}
}

func (r *recorder) healed(at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.healedAt = at
}

// clientIP is the address of client i of phase: each phase has its own clients, so that the
// fault's start from nothing counted.
func clientIP(phase, i int) string { return fmt.Sprintf("198.18.%d.%d", phase, i+1) }

// warmIP is the client of the warm-up requests of node n.
func warmIP(n int) string { return fmt.Sprintf("198.18.9.%d", n+1) }

func runCell(t *testing.T, fe FrontEnd, f Fault, policy string) Row {
	red := f.setup(t)
	workers := fe.Start(t, red.target, policy)
	if len(workers) == 0 {
		t.Fatal("the front end started no worker")
	}

	// Each node decides in Redis once before the load: connections open, scripts loaded.
	for n := range Nodes {
		i := slices.IndexFunc(workers, func(w Worker) bool { return w.Node == n })
		if i < 0 {
			t.Fatalf("no worker on node %d", n)
		}
		for deadline := time.Now().Add(recoverWithin); ; time.Sleep(20 * time.Millisecond) {
			out := workers[i].Send(warmIP(n))
			if out.Redis {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d: no decision from Redis before the fault within %v (last: %+v)", n, recoverWithin, out)
			}
		}
	}

	rec := &recorder{recovered: make(chan struct{})}
	var phase atomic.Int32
	var stop atomic.Bool
	var startedFaulty atomic.Int64 // requests started during the fault
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				ph := int(phase.Load())
				if ph == faulty {
					startedFaulty.Add(1)
				}
				c := i % Clients
				start := time.Now()
				out := w.Send(clientIP(ph, c))
				rec.add(sample{node: w.Node, phase: ph, client: c, start: start, took: time.Since(start), out: out})
			}
		}()
	}
	finish := func() {
		stop.Store(true)
		wg.Wait()
	}
	defer finish() // on a Fatal below

	time.Sleep(baselineFor)
	phase.Store(faulty)
	injected := time.Now()
	red.inject()
	if !f.instant {
		time.Sleep(time.Until(injected.Add(holdFor)))
	}
	red.heal()
	healed := time.Now()
	rec.healed(healed)
	// An instant fault (a restart of a few ms) can end before any worker starts a request, on a
	// busy machine: the requests just after it, which meet its effects, then count as its own.
	for startedFaulty.Load() == 0 && time.Since(healed) < recoverWithin {
		time.Sleep(time.Millisecond)
	}
	phase.Store(after)
	select {
	case <-rec.recovered:
	case <-time.After(recoverWithin):
	}
	time.Sleep(afterFor)
	finish()

	row := measure(rec.samples, healed)
	row.FrontEnd, row.Fault, row.Policy, row.Lasted = fe.Name, f.Name, policy, healed.Sub(injected)
	check(t, f, policy, rec.samples, row)
	return row
}

// measure computes the row of a cell from its samples; healed is the fault's end.
func measure(samples []sample, healed time.Time) Row {
	row := Row{Recovery: -1}
	var lat [nPhases][]time.Duration
	var admitted [Clients]int
	for i := range samples {
		s := &samples[i]
		lat[s.phase] = append(lat[s.phase], s.took)
		failed := s.out.Err != nil || s.out.Status >= 500
		if failed {
			row.Failed++
		}
		if s.out.Redis && s.end().After(healed) {
			if d := s.end().Sub(healed); row.Recovery < 0 || d < row.Recovery {
				row.Recovery = d
			}
		}
		if s.phase != faulty {
			continue
		}
		row.Sent++
		if !failed {
			row.Answered++
			if !s.out.Redis {
				row.ByPolicy++
			}
		}
		if s.out.Err == nil && s.out.Status == 200 {
			row.Admitted++
			admitted[s.client]++
		}
	}
	for _, a := range admitted {
		row.Over += max(a-Limit, 0)
	}
	row.BaselineP99 = p99(lat[baseline])
	row.FaultP99 = p99(lat[faulty])
	return row
}

func p99(d []time.Duration) time.Duration { return percentile(d, 99) }

// percentile returns the p-th percentile (nearest rank) of d, 0 for none. It sorts d.
func percentile(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[(len(d)*p+99)/100-1]
}

// check asserts what a cell may bound: no 5xx and every request answered under every policy;
// every decision of the fail policy is the policy's (open admits, closed denies, local admits
// at most Limit/Nodes per client and node); a fault that keeps Redis from deciding is seen by
// the policy; and Redis decides again after the fault. Latency during the fault is measured
// and reported (the table's p99 during), not asserted: on a shared machine a scheduler stall
// delays every request in flight at once, and a speed target is a benchmark's, never a test's.
func check(t *testing.T, f Fault, policy string, samples []sample, row Row) {
	t.Helper()
	type key struct{ node, phase, client int }
	localAdmitted := map[key]int{}
	bad := map[string]int{}
	var example []string
	for i := range samples {
		s := &samples[i]
		what := ""
		switch {
		case s.out.Err != nil:
			what = "no answer"
		case s.out.Status >= 500:
			what = fmt.Sprintf("status %d", s.out.Status)
		case s.out.Redis:
		case policy == "open" && s.out.Status != 200:
			what = fmt.Sprintf("fail-open answered %d", s.out.Status)
		case policy == "closed" && s.out.Status != 429:
			what = fmt.Sprintf("fail-closed answered %d", s.out.Status)
		case policy == "local" && s.out.Status == 200:
			localAdmitted[key{s.node, s.phase, s.client}]++
		}
		if what != "" {
			if bad[what] == 0 && len(example) < 3 {
				example = append(example, fmt.Sprintf("%s (%+v)", what, s.out))
			}
			bad[what]++
		}
	}
	if len(bad) > 0 {
		t.Errorf("%s, on_error %s: wrong answers %v, e.g. %s", f.Name, policy, bad, strings.Join(example, "; "))
	}
	for k, n := range localAdmitted {
		if n > Limit/Nodes {
			t.Errorf("%s, on_error local: node %d admitted %d requests of %s by its local share, want at most %d/%d = %d",
				f.Name, k.node, n, clientIP(k.phase, k.client), Limit, Nodes, Limit/Nodes)
		}
	}
	if f.degrades && row.ByPolicy == 0 {
		t.Errorf("%s, on_error %s: Redis decided all %d requests sent during the fault; want the policy to decide some", f.Name, policy, row.Sent)
	}
	if row.Sent == 0 {
		t.Errorf("%s, on_error %s: no request was sent during the fault", f.Name, policy)
	}
	if row.Recovery < 0 {
		t.Errorf("%s, on_error %s: Redis did not decide again within %v of the fault's end", f.Name, policy, recoverWithin)
	}
}

// appendTable appends the Markdown table of rows to the file out, under a heading naming the
// front end, in one write so that the front ends' tests can share the file.
func appendTable(out, frontEnd string, rows []Row) error {
	var b strings.Builder
	fmt.Fprintf(&b, "### %s\n\n", frontEnd)
	fmt.Fprintf(&b, "%d nodes × %d requests in flight; %d clients per phase, each limited to %d.\n\n",
		Nodes, Workers, Clients, Limit)
	b.WriteString("| front end | fault | policy | fault lasted | decisions continued | 5xx | by policy | p99 before | p99 during | recovery | over-admission |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		cont := "–"
		if r.Sent > 0 {
			cont = fmt.Sprintf("%d/%d (%.0f%%)", r.Answered, r.Sent, 100*float64(r.Answered)/float64(r.Sent))
		}
		recovery := "none within " + recoverWithin.String()
		if r.Recovery >= 0 {
			recovery = ms(r.Recovery)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %d | %d | %s | %s | %s | +%d (%d admitted, limit %d×%d) |\n",
			r.FrontEnd, r.Fault, r.Policy, ms(r.Lasted), cont, r.Failed, r.ByPolicy, ms(r.BaselineP99), ms(r.FaultP99), recovery,
			r.Over, r.Admitted, Clients, Limit)
	}
	b.WriteString("\n")
	f, err := os.OpenFile(out, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString(b.String())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// ms formats d in milliseconds, with a decimal below 10ms.
func ms(d time.Duration) string {
	if d < 10*time.Millisecond {
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%d ms", d.Milliseconds())
}
