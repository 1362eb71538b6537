package bench

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/diana-gw/diana/internal/redistest"
	"github.com/diana-gw/diana/rls"
	"github.com/diana-gw/diana/store/redisstore"
	"github.com/diana-gw/diana/store/stack"
)

// ratelimitVersion is the envoyproxy/ratelimit whose server BenchmarkRLS runs as the anchor,
// built from its Go module (go install) once and cached.
const ratelimitVersion = "v1.4.1-0.20260122083618-3fb702589d36"

// The load of BenchmarkRLS: closed-loop gRPC clients over rlsConns connections (as Envoy's
// workers share a few), each request two descriptors of one of rlsIPs client addresses.
const (
	rlsConns  = 4
	rlsIPs    = 1_000
	rlsPaths  = 8
	rlsRound  = 1_000 // requests per round; the rounds alternate the targets
	rlsWarmup = 2_000 // requests per target before the timer
)

// rlsDescriptors is the descriptor config both servers read: per client address, and per
// address and path, with limits far above the load so that nothing is refused.
const rlsDescriptors = `domain: bench
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 4000000000}
    descriptors:
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 4000000000}
`

// rlsBatched is rlsDescriptors with Diana's batch extension beside each rate_limit: each dianad
// takes the limits' units from Redis in batches of up to 1,000.
var rlsBatched = regexp.MustCompile(`(?m)^( *)(rate_limit: .*)$`).ReplaceAllString(rlsDescriptors, "$1$2\n${1}batch: {max: 1000}")

// BenchmarkRLS compares dianad's rate limit service in cluster mode with envoyproxy/ratelimit's
// own server, both separate processes on the same redis-server with the same descriptor config,
// under the same closed-loop load of 16 and 64 concurrent clients: requests (each two
// descriptors, so two counts in Redis) per second, their p99 latency, and the CPU time of the
// server's process per request (Redis's and the clients' not included). A third server, "empty"
// (bench/rlsempty), answers without deciding: the ceiling of requests per second that any
// server can reach under this load on this machine, whose cores the clients share. A fourth,
// "batched", is dianad with the same limits in batched mode (Diana's batch extension). With
// DIANA_RLS_BASE naming another dianad binary (an earlier commit's, built with go build), a
// fifth, "base", runs it beside the others, and diana/base-req/s compares the two in the same
// rounds.
func BenchmarkRLS(b *testing.B) {
	rs := redistest.Start(b)
	root := b.TempDir()
	cfgDir := filepath.Join(root, "rl", "config") // RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config
	batchedDir := filepath.Join(root, "batched")
	writeConfigs(b, "bench.yaml", map[string]string{cfgDir: rlsDescriptors, batchedDir: rlsBatched})
	rlAddr, rlPid := startRatelimit(b, root, rs.Addr)
	dianad := buildDianad(b)
	dianaAddr, dianaPid, metrics := startDianaRLS(b, dianad, cfgDir, rs.Addr)
	emptyAddr, emptyPid := startEmptyRLS(b)
	batchedAddr, batchedPid, batchedMetrics := startDianaRLS(b, dianad, batchedDir, rs.Addr)
	loads := []*rlsLoad{newRLSLoad(b, "ratelimit", rlAddr, rlPid), newRLSLoad(b, "diana", dianaAddr, dianaPid),
		newRLSLoad(b, "empty", emptyAddr, emptyPid), newRLSLoad(b, "batched", batchedAddr, batchedPid)}
	if base := os.Getenv("DIANA_RLS_BASE"); base != "" {
		// Another build of dianad (an earlier commit's), in the same rounds: a change's effect
		// measured under the same load, which on a shared machine varies from run to run.
		baseAddr, basePid, baseMetrics := startDianaRLS(b, base, cfgDir, rs.Addr)
		loads = append(loads, newRLSLoad(b, "base", baseAddr, basePid))
		defer checkNoFallback(b, baseMetrics)
	}
	for _, l := range loads {
		l.redisPid = rs.Pid()
	}
	warmUp(b, loads)
	for _, clients := range []int{16, 64} {
		b.Run("clients-"+strconv.Itoa(clients), func(b *testing.B) {
			stats := inTurns(b, loads, clients)
			r := stats[0] // the anchor
			reportLoads(b, loads, stats)
			for i, l := range loads {
				if st := stats[i]; l.name == "base" {
					b.ReportMetric(stats[1].rps/st.rps, "diana/base-req/s")
				}
			}
			if r.cpu > 0 { // a run of a few requests can fall within one clock tick
				b.ReportMetric(stats[1].cpu/r.cpu, "diana/ratelimit-cpu")
			}
		})
	}
	checkNoFallback(b, metrics)
	checkNoFallback(b, batchedMetrics)
}

// writeConfigs writes each descriptor config (by directory) into its directory, as name.
func writeConfigs(b testing.TB, name string, docs map[string]string) {
	for dir, doc := range docs {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(doc), 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

// warmUp makes rlsWarmup requests of each load from 64 clients, before any is measured.
func warmUp(b *testing.B, loads []*rlsLoad) {
	for _, l := range loads {
		l.run(64, rlsWarmup, nil)
		if err := l.err(); err != nil {
			b.Fatalf("warm-up, %s: %v", l.name, err)
		}
	}
}

// inTurns makes b.N requests of each load from clients closed-loop clients, the loads taking
// turns every rlsRound requests, each round in another order, and returns each one's figures.
func inTurns(b *testing.B, loads []*rlsLoad, clients int) []loadStats {
	for _, l := range loads {
		l.reset(b.N)
	}
	b.ResetTimer()
	for k := 0; k*rlsRound < b.N; k++ {
		n := min(rlsRound, b.N-k*rlsRound)
		for j := range loads { // each round in another order
			l := loads[(k+j)%len(loads)]
			runtime.GC()
			l.round(clients, n)
		}
	}
	b.StopTimer()
	for _, l := range loads {
		if err := l.err(); err != nil {
			b.Fatalf("%s: %v", l.name, err)
		}
	}
	stats := make([]loadStats, len(loads))
	for i, l := range loads {
		stats[i] = l.stats()
	}
	return stats
}

// reportLoads reports each load's figures (stats, in the order of loads): requests per second,
// p99, the CPU per request of its server and of Redis, the commands it sent Redis per request
// when they are counted, and its requests per second over the first one's, the anchor's.
func reportLoads(b *testing.B, loads []*rlsLoad, stats []loadStats) {
	b.ReportMetric(0, "ns/op")
	for i, l := range loads {
		st := stats[i]
		b.ReportMetric(st.rps, l.name+"-req/s")
		b.ReportMetric(st.p99, l.name+"-p99-µs")
		b.ReportMetric(st.cpu, l.name+"-cpu-µs/req")
		b.ReportMetric(st.redisCPU, l.name+"-redis-cpu-µs/req")
		if l.commands != nil {
			b.ReportMetric(float64(l.calls)/float64(len(l.lat)), l.name+"-redis-calls/req")
		}
		if i > 0 {
			b.ReportMetric(st.rps/stats[0].rps, l.name+"/"+loads[0].name+"-req/s")
		}
	}
}

// checkNoFallback fails b unless every decision of the dianad whose metrics are at url was
// Redis's: none came from on_error, by the series of a limit's backend errors (default
// BenchmarkRLS's first descriptor's).
func checkNoFallback(b testing.TB, url string, series ...string) {
	if len(series) == 0 {
		series = []string{`diana_backend_errors_total{rule="rls:bench.remote_address"}`}
	}
	for _, sr := range series {
		if n := scrape(b, url, sr); n != 0 {
			b.Fatalf("dianad: %v decisions made by on_error (%s): Redis did not answer in time", n, sr)
		}
	}
}

// BenchmarkRLSService is dianad's rate limit service without gRPC: ShouldRateLimit with
// BenchmarkRLS's descriptors and requests, on the cluster store stack and a real redis-server,
// from 8 goroutines per CPU. Its time and allocations per request are what dianad adds to the
// gRPC framework's (the wall time includes Redis's, on the same cores).
func BenchmarkRLSService(b *testing.B) {
	rs := redistest.Start(b)
	st, err := stack.New(stack.Redis{Conn: redisstore.Conn{Addrs: []string{rs.Addr}}, Timeout: 5 * time.Second}, stack.Hooks{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Client.Close() })
	cfg, err := rls.Parse([]rls.File{{Name: "bench.yaml", Data: []byte(rlsDescriptors)}}, rls.ParseOptions{Cluster: true})
	if err != nil {
		b.Fatal(err)
	}
	svc := rls.New(cfg, rls.Options{Store: st.Store})
	reqs := make([]*pb.RateLimitRequest, rlsIPs)
	for i := range reqs {
		reqs[i] = rlsRequest(i)
	}
	var seq atomic.Int64
	b.SetParallelism(8)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(seq.Add(7919))
		for pb.Next() {
			resp, err := svc.ShouldRateLimit(context.Background(), reqs[i%len(reqs)])
			if err != nil || len(resp.Statuses) != 2 || resp.Statuses[1].CurrentLimit == nil {
				b.Errorf("answer %v, %v", resp, err)
				return
			}
			i++
		}
	})
}

// startRatelimit builds (once, cached) and runs envoyproxy/ratelimit's server on redisAddr with
// the config under root, and returns its gRPC address.
func startRatelimit(b testing.TB, root, redisAddr string) (string, int) {
	return startRatelimitWith(b, root, redisAddr, rlsRequest(0))
}

// startRatelimitWith is startRatelimit, the server's start told by its answer to probe.
func startRatelimitWith(b testing.TB, root, redisAddr string, probe *pb.RateLimitRequest) (string, int) {
	bin := ratelimitBinary(b)
	grpcPort, httpPort, debugPort := freePort(b), freePort(b), freePort(b)
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(),
		"USE_STATSD=false", "LOG_LEVEL=warn", "BACKEND_TYPE=redis",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL="+redisAddr,
		"RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=rl", "RUNTIME_WATCH_ROOT=false",
		"GRPC_HOST=127.0.0.1", "GRPC_PORT="+strconv.Itoa(grpcPort),
		"HOST=127.0.0.1", "PORT="+strconv.Itoa(httpPort),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+strconv.Itoa(debugPort))
	addr := "127.0.0.1:" + strconv.Itoa(grpcPort)
	return addr, startProcessWith(b, cmd, addr, probe)
}

// buildDianad builds dianad and returns its path.
func buildDianad(b testing.TB) string {
	bin := filepath.Join(b.TempDir(), "dianad")
	build := exec.Command(goTool(), "build", "-o", bin, "../cmd/dianad")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("go build dianad: %v\n%s", err, out)
	}
	return bin
}

// startDianaRLS runs dianad (the binary bin) with an rls section in cluster mode on redisAddr,
// and returns its gRPC address, its process id and its metrics URL.
func startDianaRLS(b testing.TB, bin, cfgDir, redisAddr string) (string, int, string) {
	grpcAddr, admin, pid := startDianad(b, bin, cfgDir, redisAddr, "", rlsRequest(0))
	return grpcAddr, pid, "http://" + admin + "/metrics"
}

// startDianad runs dianad (the binary bin) with an rls section in cluster mode reading cfgDir on
// redisAddr and the config lines more, waits until it answers probe with a limit on each
// descriptor, and returns its gRPC address, its admin address and its process id.
func startDianad(b testing.TB, bin, cfgDir, redisAddr, more string, probe *pb.RateLimitRequest) (string, string, int) {
	grpcAddr := "127.0.0.1:" + strconv.Itoa(freePort(b))
	admin := "127.0.0.1:" + strconv.Itoa(freePort(b))
	cfg := filepath.Join(b.TempDir(), "diana.yaml")
	// The Redis timeout is long: on a busy 2-core machine a round trip can take more than the
	// default 50 ms, and a decision made by on_error would not be the work compared.
	doc := `version: 1
listen: ""
admin: {listen: "` + admin + `"}
redis: {addrs: ["` + redisAddr + `"], timeout: 5s}
rls: {listen: "` + grpcAddr + `", config_dir: "` + cfgDir + `", mode: cluster}
` + more
	if err := os.WriteFile(cfg, []byte(doc), 0o644); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, "--config", cfg, "--log-level", "warn")
	return grpcAddr, admin, startProcessWith(b, cmd, grpcAddr, probe)
}

// startEmptyRLS builds and runs bench/rlsempty, the ceiling: a rate limit service that decides
// nothing.
func startEmptyRLS(b testing.TB) (string, int) {
	bin := filepath.Join(b.TempDir(), "rlsempty")
	build := exec.Command(goTool(), "build", "-o", bin, "./rlsempty")
	if out, err := build.CombinedOutput(); err != nil {
		b.Fatalf("go build rlsempty: %v\n%s", err, out)
	}
	addr := "127.0.0.1:" + strconv.Itoa(freePort(b))
	return addr, startProcess(b, exec.Command(bin, "-listen", addr), addr)
}

// startProcess starts cmd, stopped when the benchmark ends, waits until the rate limit service
// at addr answers a request of the benchmark's with a limit, and returns the process id.
func startProcess(b testing.TB, cmd *exec.Cmd, addr string) int {
	return startProcessWith(b, cmd, addr, rlsRequest(0))
}

// startProcessWith is startProcess, waiting for an answer to probe with a limit on each of its
// descriptors.
func startProcessWith(b testing.TB, cmd *exec.Cmd, addr string, probe *pb.RateLimitRequest) int {
	out := &lockedBuf{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	b.Cleanup(func() {
		cmd.Process.Kill()
		<-done
	})
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	c := pb.NewRateLimitServiceClient(conn)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		resp, err := c.ShouldRateLimit(ctx, probe)
		cancel()
		if err == nil && len(resp.Statuses) == len(probe.Descriptors) &&
			!slices.ContainsFunc(resp.Statuses, func(st *pb.RateLimitResponse_DescriptorStatus) bool { return st.CurrentLimit == nil }) {
			return cmd.Process.Pid
		}
		select {
		case <-done:
			b.Fatalf("%s exited: %s", cmd.Path, out.String())
		default:
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s does not answer with a limit (%v, %v): %s", cmd.Path, resp, err, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ratelimitBinary returns envoyproxy/ratelimit's server, built by go install into the user's
// cache directory the first time (a couple of minutes, through the Go module proxy).
func ratelimitBinary(b testing.TB) string {
	cache, err := os.UserCacheDir()
	if err != nil {
		b.Fatal(err)
	}
	dir := filepath.Join(cache, "diana", "ratelimit-"+ratelimitVersion)
	bin := filepath.Join(dir, "service_cmd")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	tmp := dir + ".tmp"
	os.RemoveAll(tmp)
	cmd := exec.Command(goTool(), "install", "github.com/envoyproxy/ratelimit/src/service_cmd@"+ratelimitVersion)
	cmd.Dir = os.TempDir() // outside this module: its own go.mod decides
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("building envoyproxy/ratelimit %s: %v\n%s", ratelimitVersion, err, out)
	}
	if err := os.Rename(tmp, dir); err != nil {
		b.Fatal(err)
	}
	return bin
}

func goTool() string { return filepath.Join(runtime.GOROOT(), "bin", "go") }

// freePort returns a loopback port that was free a moment ago.
func freePort(b testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// scrape returns the value of one series of a Prometheus text page, 0 when absent.
func scrape(b testing.TB, url, series string) float64 {
	res, err := http.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		b.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindSubmatch(body)
	if m == nil {
		return 0
	}
	v, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		b.Fatal(err)
	}
	return v
}

// rlsRequest is the i-th client's request: its address, and its address and path.
func rlsRequest(i int) *pb.RateLimitRequest {
	ip := "10.0." + strconv.Itoa(i%rlsIPs/256) + "." + strconv.Itoa(i%256)
	entry := func(k, v string) *rlv3.RateLimitDescriptor_Entry {
		return &rlv3.RateLimitDescriptor_Entry{Key: k, Value: v}
	}
	return &pb.RateLimitRequest{Domain: "bench", Descriptors: []*rlv3.RateLimitDescriptor{
		{Entries: []*rlv3.RateLimitDescriptor_Entry{entry("remote_address", ip)}},
		{Entries: []*rlv3.RateLimitDescriptor_Entry{entry("remote_address", ip), entry("path", "/api/items/"+strconv.Itoa(i%rlsPaths))}},
	}}
}

// rlsLoad is the closed-loop load of one target.
type rlsLoad struct {
	name     string
	pid      int           // the server's process
	cpu      time.Duration // its CPU time in the rounds
	redisPid int           // redis-server's process
	redisCPU time.Duration // its CPU time in the rounds
	// call makes request i of worker w, an error if its answer is not the one expected.
	call func(w, i int) error
	// commands, if set, counts the commands redis-server has run; calls adds up their number in
	// the rounds.
	commands func() int64
	calls    int64
	lat      []time.Duration
	elapsed  time.Duration
	failures
}

// newRLSLoad is the load of BenchmarkRLS's requests (rlsRequest) on the rate limit service at
// addr, served by process pid.
func newRLSLoad(b testing.TB, name, addr string, pid int) *rlsLoad {
	reqs := make([]*pb.RateLimitRequest, rlsIPs)
	for i := range reqs {
		reqs[i] = rlsRequest(i)
	}
	return newGRPCLoad(b, name, addr, pid, reqs)
}

// newGRPCLoad is the load of reqs on the rate limit service at addr, served by process pid, over
// rlsConns connections: an answer that is not OK with a limit on every descriptor is a failure.
func newGRPCLoad(b testing.TB, name, addr string, pid int, reqs []*pb.RateLimitRequest) *rlsLoad {
	var clients []pb.RateLimitServiceClient // one per connection
	for range rlsConns {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { conn.Close() })
		clients = append(clients, pb.NewRateLimitServiceClient(conn))
	}
	return &rlsLoad{name: name, pid: pid, call: func(w, i int) error {
		req := reqs[(w*7919+i)%len(reqs)]
		resp, err := clients[w%len(clients)].ShouldRateLimit(context.Background(), req)
		if err != nil {
			return err
		}
		if resp.OverallCode != pb.RateLimitResponse_OK || len(resp.Statuses) != len(req.Descriptors) ||
			slices.ContainsFunc(resp.Statuses, func(st *pb.RateLimitResponse_DescriptorStatus) bool { return st.CurrentLimit == nil }) {
			return errors.New("unexpected answer " + resp.String())
		}
		return nil
	}}
}

func (l *rlsLoad) reset(n int) {
	l.lat = make([]time.Duration, 0, n)
	l.elapsed, l.cpu, l.redisCPU, l.calls, l.failures = 0, 0, 0, 0, failures{}
}

func (l *rlsLoad) round(clients, n int) {
	var calls int64
	if l.commands != nil {
		calls = l.commands()
	}
	start, cpu, redisCPU := time.Now(), procCPU(l.pid), procCPU(l.redisPid)
	l.run(clients, n, l.lat[len(l.lat):len(l.lat)+n])
	l.elapsed += time.Since(start)
	l.cpu += procCPU(l.pid) - cpu
	l.redisCPU += procCPU(l.redisPid) - redisCPU
	if l.commands != nil {
		l.calls += l.commands() - calls
	}
	l.lat = l.lat[:len(l.lat)+n]
}

// run sends n requests from clients workers, recording request i's latency in lat[i] (nil:
// none recorded).
func (l *rlsLoad) run(clients, n int, lat []time.Duration) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range clients {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				start := time.Now()
				err := l.call(w, i)
				d := time.Since(start)
				switch {
				case err != nil:
					l.fail(err)
				case lat != nil:
					lat[i] = d
				}
			}
		})
	}
	wg.Wait()
}

func (l *rlsLoad) stats() loadStats {
	lat := slices.Clone(l.lat)
	slices.Sort(lat)
	i := max(int(math.Ceil(0.99*float64(len(lat))))-1, 0)
	return loadStats{
		rps:      float64(len(lat)) / l.elapsed.Seconds(),
		p99:      float64(lat[i]) / float64(time.Microsecond),
		cpu:      float64(l.cpu) / float64(time.Microsecond) / float64(len(lat)),
		redisCPU: float64(l.redisCPU) / float64(time.Microsecond) / float64(len(lat)),
	}
}

// procCPU is the CPU time (user and system) process pid has used, from /proc/PID/stat in clock
// ticks of 10 ms (USER_HZ 100 on Linux).
func procCPU(pid int) time.Duration {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0 // not Linux: the CPU figures read 0
	}
	// The fields after the command's name, which is in parentheses and may hold spaces.
	f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// lockedBuf collects a process's output for the error that reports it.
type lockedBuf struct {
	mu  sync.Mutex
	buf []byte
}

func (w *lockedBuf) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) < 64<<10 {
		w.buf = append(w.buf, p...)
	}
	return len(p), nil
}

func (w *lockedBuf) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.buf)
}
