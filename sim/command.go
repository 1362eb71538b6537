package sim

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Main runs the command `dianasim [flags]` with args (the flags) and returns its exit
// code: 0, 1 when the run failed, 2 for bad flags.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("dianasim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: dianasim [flags]")
		fmt.Fprintln(stderr, "Replays request traces through every algorithm in local, cluster, batched and failover modes and")
		fmt.Fprintln(stderr, "writes DIR/accuracy.json, DIR/accuracy.md (rendered from it) and the charts DIR/img/accuracy-*.svg.")
		fs.PrintDefaults()
	}
	out := fs.String("out", "accuracy-report", "write the report to `DIR`")
	addr := fs.String("redis", "", "Redis `ADDR` (host:port) for the modes that use Redis, whose keys go under diana-sim: and expire within about an hour; empty: start a redis-server on a free loopback port")
	from := fs.String("render", "", "run nothing: render DIR/accuracy.md (and the -readme quotes) again from the accuracy.json `FILE`, after a change of the prose")
	readme := fs.String("readme", "", "also rewrite the report's quotes in the README `FILE` (between its <!-- make report: NAME --> and <!-- end: NAME --> lines)")
	seed := fs.Uint64("seed", 1, "the `seed` the traces are generated from")
	quick := fs.Bool("quick", false, "shorter traces and fewer clients: a smaller, faster run")
	clients := fs.Int("pareto-clients", 10_000, "clients of the pareto-clients trace (estimates only)")
	nodes := fs.Int("nodes", 4, "gateway `nodes` the requests are spread over")
	parallel := fs.Int("parallel", 4, "runs at once (the results do not depend on it: each run has its own keys and clock)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "dianasim: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *nodes < 1 || *nodes > 64 {
		fmt.Fprintf(stderr, "dianasim: -nodes must be between 1 and 64, got %d\n", *nodes)
		return 2
	}
	if *clients < 1 {
		fmt.Fprintf(stderr, "dianasim: -pareto-clients must be at least 1, got %d\n", *clients)
		return 2
	}
	if *parallel < 1 {
		fmt.Fprintf(stderr, "dianasim: -parallel must be at least 1, got %d\n", *parallel)
		return 2
	}

	if *from != "" {
		b, err := os.ReadFile(*from)
		if err != nil {
			fmt.Fprintln(stderr, "dianasim:", err)
			return 1
		}
		d, err := ReadData(b)
		if err == nil {
			err = writeText(*out, *readme, d)
		}
		if err != nil {
			fmt.Fprintln(stderr, "dianasim:", err)
			return 1
		}
		fmt.Fprintf(stdout, "rendered %s from %s\n", filepath.Join(*out, "accuracy.md"), *from)
		return 0
	}

	if *addr == "" {
		a, stop, err := StartRedis(ctx)
		if err != nil {
			fmt.Fprintln(stderr, "dianasim:", err)
			return 1
		}
		defer stop()
		*addr = a
	}
	// No read or write deadline: a busy machine makes a run slower, never different.
	c := redis.NewClient(&redis.Options{Addr: *addr, ContextTimeoutEnabled: true, ReadTimeout: -1, WriteTimeout: -1})
	defer c.Close()
	version, err := redisVersion(ctx, c)
	if err != nil {
		fmt.Fprintf(stderr, "dianasim: Redis at %s: %v\n", *addr, err)
		return 1
	}

	keyLife, err := KeyLife(ctx, c)
	if err != nil {
		fmt.Fprintf(stderr, "dianasim: Redis at %s: %v\n", *addr, err)
		return 1
	}
	began := time.Now()
	limit := DefaultLimit()
	to := TraceOptions{Seed: *seed, Limit: limit, Nodes: *nodes, ParetoClients: *clients}
	if *quick {
		to.Length, to.Clients, to.ParetoClients = 4, 2000, min(*clients, 1000)
	}
	traces, err := Traces(to)
	if err != nil {
		fmt.Fprintln(stderr, "dianasim:", err)
		return 2
	}
	estTraces, err := EstimateTraces(to)
	if err != nil {
		fmt.Fprintln(stderr, "dianasim:", err)
		return 2
	}
	batch := StandardBatch(limit)
	o := Options{Seed: *seed, Limit: limit, Traces: traces, EstimateTraces: estTraces, Parallel: *parallel, KeyLife: keyLife,
		Modes: []Mode{LocalFull(), LocalSplit(), Cluster(c), Batched(c, batch), Failover(c, StandardOutage)},
		Progress: func(done, total int) {
			if done%20 == 0 || done == total {
				fmt.Fprintf(stderr, "dianasim: %d of %d runs done\n", done, total)
			}
		}}
	rep, err := Run(ctx, o)
	if err != nil {
		fmt.Fprintln(stderr, "dianasim:", err)
		return 1
	}
	rep.Batch = &batch
	scale, err := RunScale(ctx, c, *seed, *nodes, *parallel, keyLife)
	if err != nil {
		fmt.Fprintln(stderr, "dianasim:", err)
		return 1
	}
	command := "dianasim -seed " + strconv.FormatUint(*seed, 10)
	if *quick {
		command += " -quick"
	}
	if *nodes != 4 {
		command += " -nodes " + strconv.Itoa(*nodes)
	}
	if *clients != 10_000 {
		command += " -pareto-clients " + strconv.Itoa(*clients)
	}
	m := Machine{CPU: cpuModel(), Cores: runtime.NumCPU(), OS: runtime.GOOS + "/" + runtime.GOARCH, Go: runtime.Version(), Redis: version}
	elapsed := time.Since(began)
	d := NewData(m, command, elapsed, rep, scale)
	if err := WriteDir(*out, d, rep); err != nil {
		fmt.Fprintln(stderr, "dianasim:", err)
		return 1
	}
	if *readme != "" {
		if err := writeText(*out, *readme, d); err != nil {
			fmt.Fprintln(stderr, "dianasim:", err)
			return 1
		}
	}
	fmt.Fprintf(stdout, "wrote %s, %s and %d charts in %s (%s)\n", filepath.Join(*out, "accuracy.json"), filepath.Join(*out, "accuracy.md"), 2*len(traces),
		filepath.Join(*out, "img"), elapsed.Round(time.Millisecond))
	return 0
}

// writeText writes dir/accuracy.md, rendered from d, and the report's quotes in the README at
// readme, if not empty.
func writeText(dir, readme string, d *Data) error {
	if err := os.WriteFile(filepath.Join(dir, "accuracy.md"), d.Markdown(), 0o644); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	if readme == "" {
		return nil
	}
	old, err := os.ReadFile(readme)
	if err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	b, err := ReplaceQuotes(old, d.Quotes())
	if err != nil {
		return err
	}
	if err := os.WriteFile(readme, b, 0o644); err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	return nil
}

// StandardBatch is the batch block of the batched mode of a standard run: batches of 1 to a
// tenth of the limit, spent within a tenth of the window.
func StandardBatch(l Limit) BatchOptions {
	return BatchOptions{Min: 1, Max: max(1, l.Units/10), MaxAge: l.Window / 10}
}

// StandardOutage is when Redis is unreachable in the failover mode of a standard run: the middle
// third of each trace.
var StandardOutage = [2]float64{1.0 / 3, 2.0 / 3}

// StartRedis starts a redis-server without persistence on a free loopback port and returns its
// address and a function that stops it and removes its directory. A port is free when the
// kernel gives it, but another process may bind it before redis-server does: then it starts
// again on another (a few times).
func StartRedis(ctx context.Context) (addr string, stop func(), err error) {
	for range 5 {
		addr, stop, err = startRedis(ctx)
		if err == nil || !strings.Contains(err.Error(), "Address already in use") {
			break
		}
	}
	return addr, stop, err
}

func startRedis(ctx context.Context) (addr string, stop func(), err error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", nil, fmt.Errorf("redis-server is not on PATH (install it, e.g. apt-get install redis-server, or give -redis ADDR): %w", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, fmt.Errorf("find a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir, err := os.MkdirTemp("", "diana-sim-redis-")
	if err != nil {
		return "", nil, err
	}
	addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", filepath.Join(dir, "redis.log"))
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("start redis-server: %w", err)
	}
	stop = func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		os.RemoveAll(dir)
	}
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c.Ping(ctx).Err() == nil {
			return addr, stop, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			stop()
			return "", nil, fmt.Errorf("redis-server on %s did not answer PING within 10s: %s", addr, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// redisVersion returns the server's redis_version.
func redisVersion(ctx context.Context, c *redis.Client) (string, error) {
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v, nil
		}
	}
	return "unknown", nil
}

// cpuModel returns the CPU's model name from /proc/cpuinfo, or "unknown CPU".
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}
