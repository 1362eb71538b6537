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
		fmt.Fprintln(stderr, "Replays request traces through every algorithm in local, cluster and batched modes and writes")
		fmt.Fprintln(stderr, "DIR/accuracy.md and the charts DIR/img/accuracy-*.svg.")
		fs.PrintDefaults()
	}
	out := fs.String("out", "accuracy-report", "write the report to `DIR`")
	addr := fs.String("redis", "", "Redis `ADDR` (host:port) for cluster and batched modes, whose keys go under diana-sim: and expire within minutes; empty: start a redis-server on a free loopback port")
	seed := fs.Uint64("seed", 1, "the `seed` the traces are generated from")
	quick := fs.Bool("quick", false, "shorter traces and fewer clients: a smaller run in a few seconds")
	nodes := fs.Int("nodes", 4, "gateway `nodes` the requests are spread over")
	parallel := fs.Int("parallel", 2, "runs at once")
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
	if *parallel < 1 {
		fmt.Fprintf(stderr, "dianasim: -parallel must be at least 1, got %d\n", *parallel)
		return 2
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
	c := redis.NewClient(&redis.Options{Addr: *addr, ContextTimeoutEnabled: true})
	defer c.Close()
	version, err := redisVersion(ctx, c)
	if err != nil {
		fmt.Fprintf(stderr, "dianasim: Redis at %s: %v\n", *addr, err)
		return 1
	}

	limit := DefaultLimit()
	to := TraceOptions{Seed: *seed, Limit: limit, Nodes: *nodes}
	if *quick {
		to.Length, to.Clients = 4, 2000
	}
	traces, err := Traces(to)
	if err != nil {
		fmt.Fprintln(stderr, "dianasim:", err)
		return 2
	}
	o := Options{Seed: *seed, Limit: limit, Traces: traces, Parallel: *parallel,
		Modes: []Mode{LocalFull(), LocalSplit(), Cluster(c), Batched(c, StandardBatch(limit))},
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
	scale, err := RunScale(ctx, c, *seed, *nodes, *parallel)
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
	m := Machine{CPU: cpuModel(), Cores: runtime.NumCPU(), OS: runtime.GOOS + "/" + runtime.GOARCH, Go: runtime.Version(), Redis: version}
	if err := rep.WriteDir(*out, m, command, scale.ScaleMarkdown()); err != nil {
		fmt.Fprintln(stderr, "dianasim:", err)
		return 1
	}
	fmt.Fprintf(stdout, "wrote %s and %d charts in %s (%s)\n", filepath.Join(*out, "accuracy.md"), 2*len(traces),
		filepath.Join(*out, "img"), rep.Elapsed.Round(time.Millisecond))
	return 0
}

// StandardBatch is the batch block of the batched mode of a standard run: batches of 1 to a
// tenth of the limit, spent within a tenth of the window.
func StandardBatch(l Limit) BatchOptions {
	return BatchOptions{Min: 1, Max: max(1, l.Units/10), MaxAge: l.Window / 10}
}

// StartRedis starts a redis-server without persistence on a free loopback port and returns its
// address and a function that stops it and removes its directory.
func StartRedis(ctx context.Context) (addr string, stop func(), err error) {
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
