// Command proxyload measures dianad's reverse proxy under load beside its anchor, a plain
// httputil.ReverseProxy (make bench-proxy).
//
//	proxyload [-duration 5s] [-rounds 3] [-conns 32] [-threads 2] [-driver wrk|go]
//	          [-dianad bin/dianad] [-nginx=true] [-json FILE]
//
// On loopback only, it starts a small upstream and, in front of it, each target in a process
// of its own: "plain", the anchor, a plain httputil.ReverseProxy with dianad's transport and
// rewrite (and, as a plain ReverseProxy has, no pool of copy buffers); "pooled", the same with
// dianad's pool of copy buffers; "dianad", the binary given, with three rules in local mode
// (bench.ProxyConfig); and "nginx" as a reference, when installed. It then drives each target
// with wrk (or the Go load generator, -driver go) for -duration, in -rounds rounds whose order
// alternates (plain, pooled, dianad, nginx, then backwards), so that all see the same machine.
//
// Printed per target: the medians over the rounds of requests/s, p50 and p99 latency and the
// target's CPU per request (its workers' included), and the medians (min–max) over the rounds of
// each figure's ratio to the anchor's in the same round. The load generator's own CPU (in cores)
// is printed to show it was not the bottleneck.
package main

import (
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/diana-gw/diana/bench"
)

func main() {
	serveRole()
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// options are the command line's.
type options struct {
	duration, warmup time.Duration
	rounds           int
	conns, threads   int
	driver           string // wrk or go
	dianad           string // dianad's binary; "" leaves dianad out
	nginx            bool
	json             string
}

// The report's types are bench's, which the performance page reads (bench/report).
type (
	Report = bench.ProxyReport
	Target = bench.ProxyTarget
	Spread = bench.Spread
)

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("proxyload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.DurationVar(&o.duration, "duration", 5*time.Second, "load per target and round (rounded up to whole seconds with wrk)")
	fs.DurationVar(&o.warmup, "warmup", time.Second, "load per target before the rounds")
	fs.IntVar(&o.rounds, "rounds", 3, "rounds, each target once a round")
	fs.IntVar(&o.conns, "conns", 32, "keep-alive connections, each with one request in flight")
	fs.IntVar(&o.threads, "threads", 2, "wrk's threads")
	fs.StringVar(&o.driver, "driver", "wrk", "load generator: wrk, or go (this program's)")
	fs.StringVar(&o.dianad, "dianad", "bin/dianad", "dianad's binary (\"\": leave dianad out)")
	fs.BoolVar(&o.nginx, "nginx", true, "measure nginx too, as a reference, when it is installed")
	fs.StringVar(&o.json, "json", "", "also write the report as JSON to `FILE`")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 || o.rounds < 1 || o.conns < 1 || o.threads < 1 || o.duration <= 0 || o.warmup < 0 ||
		(o.driver != "wrk" && o.driver != "go") {
		fmt.Fprintln(stderr, "proxyload: bad arguments (see proxyload -h)")
		return 2
	}
	rep, err := measure(o, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "proxyload:", err)
		return 1
	}
	rep.Command = strings.Join(append([]string{"proxyload"}, args...), " ")
	print(stdout, rep)
	if o.json != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(o.json, append(b, '\n'), 0o644); err != nil {
			fmt.Fprintln(stderr, "proxyload:", err)
			return 1
		}
	}
	return 0
}

// target is a running proxy under test.
type target struct {
	name, about, url string
	proc             *proc
	limited          bool // its answers carry RateLimit-Limit
}

// measure starts the upstream and the targets, drives them and returns the report.
func measure(o options, progress io.Writer) (*Report, error) {
	machine := bench.ThisMachine()
	dir, err := os.MkdirTemp("", "proxyload-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var procs []*proc
	defer func() {
		for _, p := range procs {
			p.stop()
		}
	}()
	launch := func(name string, env []string, bin string, args ...string) (string, *proc, error) {
		addr, err := freeAddr()
		if err != nil {
			return "", nil, err
		}
		if env != nil {
			env = append(env, listenEnv+"="+addr)
		}
		args = slices.Clone(args)
		for i := range args {
			args[i] = strings.ReplaceAll(args[i], "{addr}", addr)
		}
		p, err := start(dir, name, addr, env, bin, args...)
		if err != nil {
			return "", nil, err
		}
		procs = append(procs, p)
		return addr, p, nil
	}

	upAddr, _, err := launch("upstream", []string{roleEnv + "=upstream"}, self)
	if err != nil {
		return nil, err
	}
	upURL := "http://" + upAddr
	var targets []*target
	add := func(name, about string, limited bool, env []string, bin string, args ...string) error {
		addr, p, err := launch(name, env, bin, args...)
		if err != nil {
			return err
		}
		targets = append(targets, &target{name: name, about: about, url: "http://" + addr, proc: p, limited: limited})
		return nil
	}
	goEnv := func(role string) []string { return []string{roleEnv + "=" + role, upstreamEnv + "=" + upURL} }
	if err := add("plain", "httputil.ReverseProxy, no BufferPool (the anchor)", false, goEnv("plain"), self); err != nil {
		return nil, err
	}
	if err := add("pooled", "httputil.ReverseProxy with dianad's BufferPool", false, goEnv("pooled"), self); err != nil {
		return nil, err
	}
	if o.dianad != "" {
		bin, err := filepath.Abs(o.dianad)
		if err != nil {
			return nil, err
		}
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		conf := filepath.Join(dir, "diana.yaml")
		if err := os.WriteFile(conf, []byte(bench.ProxyConfig(addr, upURL)), 0o600); err != nil {
			return nil, err
		}
		p, err := start(dir, "dianad", addr, nil, bin, "--config", conf, "--log-level", "warn")
		if err != nil {
			return nil, err
		}
		procs = append(procs, p)
		targets = append(targets, &target{name: "dianad", about: "dianad, 3 rules in local mode", url: "http://" + addr, proc: p, limited: true})
	}
	if nginx := nginxPath(); o.nginx && nginx != "" {
		ndir := filepath.Join(dir, "nginx")
		if err := os.Mkdir(ndir, 0o700); err != nil {
			return nil, err
		}
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		conf := filepath.Join(ndir, "nginx.conf")
		if err := os.WriteFile(conf, fmt.Appendf(nil, nginxConf, ndir, addr, upAddr), 0o600); err != nil {
			return nil, err
		}
		global := "daemon off; pid " + filepath.Join(ndir, "nginx.pid") + ";"
		if os.Geteuid() == 0 {
			global += " user root;" // workers as nobody could not use ndir
		}
		p, err := start(ndir, "nginx", addr, nil, nginx, "-p", ndir, "-e", filepath.Join(ndir, "error.log"), "-c", conf, "-g", global)
		if err != nil {
			return nil, err
		}
		procs = append(procs, p)
		targets = append(targets, &target{name: "nginx", about: "nginx " + nginxVersion(nginx) + ", 2 workers (a reference)", url: "http://" + addr, proc: p})
	}

	for _, t := range targets {
		if err := probe(t); err != nil {
			return nil, err
		}
	}
	var drive func(url string, d time.Duration) (result, error)
	rep := &Report{Machine: machine, Seconds: o.duration.Seconds(), Rounds: o.rounds, Anchor: "plain"}
	switch o.driver {
	case "wrk":
		if _, err := exec.LookPath("wrk"); err != nil {
			return nil, fmt.Errorf("wrk is not installed (Debian: apt-get install wrk), or use -driver go: %w", err)
		}
		script := filepath.Join(dir, "mix.lua")
		if err := os.WriteFile(script, []byte(wrkScript), 0o600); err != nil {
			return nil, err
		}
		rep.Driver = fmt.Sprintf("wrk -t %d -c %d", o.threads, o.conns)
		rep.Seconds = max(math.Ceil(o.duration.Seconds()), 1) // as runWrk runs it
		drive = func(url string, d time.Duration) (result, error) { return runWrk(url, d, o.threads, o.conns, script) }
	case "go":
		rep.Driver = fmt.Sprintf("proxyload's Go load generator, %d connections", o.conns)
		drive = func(url string, d time.Duration) (result, error) { return goLoad(url, o.conns, 0, d) }
	}

	fmt.Fprintf(progress, "proxyload: %s; %d targets, %v each per round, %d rounds\n", machine, len(targets), o.duration, o.rounds)
	for _, t := range targets { // connections opened, every key in dianad's store
		if o.warmup == 0 {
			break
		}
		if _, err := drive(t.url, o.warmup); err != nil {
			return nil, fmt.Errorf("warm-up of %s: %w", t.name, err)
		}
	}
	runs := make(map[string][]result)
	for r := range o.rounds {
		order := slices.Clone(targets)
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, t := range order {
			cpu0, err := t.proc.cpu()
			if err != nil {
				return nil, err
			}
			res, err := drive(t.url, o.duration)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", t.name, err)
			}
			if res.Errors > 0 {
				return nil, fmt.Errorf("%s: %d of %d requests failed (errors, timeouts or answers other than 200)", t.name, res.Errors, res.Requests)
			}
			cpu1, err := t.proc.cpu()
			if err != nil {
				return nil, err
			}
			res.TargetCPU = float64(cpu1-cpu0) / float64(time.Microsecond) / float64(res.Requests)
			runs[t.name] = append(runs[t.name], res)
			fmt.Fprintf(progress, "  round %d %-7s %8.0f req/s  p99 %6.0f µs\n", r+1, t.name, res.RPS, res.P99)
		}
	}
	anchor := runs["plain"]
	for _, t := range targets {
		rs := runs[t.name]
		get := func(f func(result) float64) (med Spread, ratio Spread) {
			v, q := make([]float64, len(rs)), make([]float64, len(rs))
			for i, r := range rs {
				v[i], q[i] = f(r), f(r)/f(anchor[i])
			}
			return bench.SpreadOf(v), bench.SpreadOf(q)
		}
		rps, rpsQ := get(func(r result) float64 { return r.RPS })
		p50, _ := get(func(r result) float64 { return r.P50 })
		p99, p99Q := get(func(r result) float64 { return r.P99 })
		cpu, cpuQ := get(func(r result) float64 { return r.TargetCPU })
		drv, _ := get(func(r result) float64 { return r.DriverCPU })
		rep.Targets = append(rep.Targets, Target{
			Name: t.name, About: t.about, RPS: rps.Median, P50: p50.Median, P99: p99.Median, CPU: cpu.Median,
			Driver: drv.Median, RPSRatio: rpsQ, P99Ratio: p99Q, CPURatio: cpuQ, RoundRuns: rs,
		})
	}
	return rep, nil
}

// probe checks that t answers 200, with RateLimit-Limit if and only if it limits.
func probe(t *target) error {
	path, xff := bench.ProxyRequest(0)
	req, err := http.NewRequest("GET", t.url+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("X-Forwarded-For", xff)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", t.name, err)
	}
	defer res.Body.Close()
	io.Copy(io.Discard, res.Body)
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("%s answered %s", t.name, res.Status)
	}
	if got := res.Header.Get("RateLimit-Limit") != ""; got != t.limited {
		return fmt.Errorf("%s: RateLimit-Limit %q: only dianad should limit", t.name, res.Header.Get("RateLimit-Limit"))
	}
	return nil
}

// nginxVersion is nginx's version, as nginx -v prints it ("1.22.1").
func nginxVersion(bin string) string {
	out, _ := exec.Command(bin, "-v").CombinedOutput()
	_, v, _ := strings.Cut(strings.TrimSpace(string(out)), "nginx/")
	return cmp.Or(v, "(unknown version)")
}

// print writes the report as a table.
func print(w io.Writer, rep *Report) {
	fmt.Fprintf(w, "%s, %g s per target and round, %d rounds; medians, ratios to %s's of the same round (min–max)\n",
		rep.Driver, rep.Seconds, rep.Rounds, rep.Anchor)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\treq/s\tp50 µs\tp99 µs\tCPU µs/req\treq/s ratio\tp99 ratio\tCPU ratio\tload gen. cores\t")
	for _, t := range rep.Targets {
		fmt.Fprintf(tw, "%s\t%.0f\t%.0f\t%.0f\t%.1f\t%s\t%s\t%s\t%.2f\t\n", t.Name, t.RPS, t.P50, t.P99, t.CPU,
			t.RPSRatio, t.P99Ratio, t.CPURatio, t.Driver)
	}
	tw.Flush()
}
