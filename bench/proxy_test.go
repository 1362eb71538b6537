package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/diana-gw/diana/httplimit"
	"github.com/diana-gw/diana/server"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/memstore"
)

// The load of BenchmarkProxy: closed-loop clients on keep-alive connections, each request from
// one of the client addresses (X-Forwarded-For) to one of the paths (ProxyRequest).
const (
	proxyClients = 32    // concurrent clients, each with one request in flight
	proxyRound   = 1_000 // requests per round; the rounds alternate the targets
	proxyWarmup  = 2_000 // requests per target before the timer: connections and keys in place
)

// BenchmarkProxy compares dianad in local mode with its anchor, a plain httputil.ReverseProxy,
// both in front of the same upstream and under the same load. The plain proxy mirrors dianad's
// (the same Rewrite, transport and server settings), so that the difference is Diana's work:
// choosing the upstream, reading the client address, three rules decided in the local store,
// the metrics and the rate-limit headers.
//
// An op is one request to each target. A run splits its b.N requests per target into rounds of
// 1,000 (about a tenth of a second) and alternates the targets round by round (plain, diana,
// diana, plain, ...), with a GC before each round so that no round pays for the garbage of the
// one before. On a small shared VM, where the clients, both proxies and the upstream share the
// cores with whatever else runs, throughput drifts between runs by more than the difference
// measured; targets run one after the other (separate sub-benchmarks, whose -count repetitions
// run back to back) would measure that drift, while alternating short rounds gives both the same
// machine. The ratios of one run are the figures to trust; -count gives several runs, and the
// median ratio is the result.
//
// Reported per target: throughput (req/s); the p50 and p99 latency seen by the clients (µs); and
// the CPU time of the whole process per request (µs: clients, proxy and upstream). The CPU time
// is the steadiest figure of Diana's extra work, as the time other processes take from the cores
// does not count in it. Then the ratios diana/plain of the throughput, the p99 and the CPU time.
// The clients keep the cores saturated, so the requests mostly queue for a core: the p50 is about
// 32 / throughput (Little's law), and the p99 mostly shows the scheduling. ns/op is not reported
// (an op is two requests to different targets); with -benchmem, B/op and allocs/op count the
// whole process per op.
func BenchmarkProxy(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok":true}`+"\n")
	}))
	b.Cleanup(up.Close)
	plain := newLoad(b, "plain", startPlain(b, up.URL))
	diana := newLoad(b, "diana", startDiana(b, up.URL))

	// Warm up: connections opened, every key in the store; and check what each target answers.
	for _, l := range []*load{plain, diana} {
		l.run(proxyWarmup, nil)
		if err := l.err(); err != nil {
			b.Fatalf("warm-up, %s: %v", l.name, err)
		}
	}
	if plain.limitHeader != "" || diana.limitHeader == "" {
		b.Fatalf("RateLimit-Limit: plain %q, diana %q: only diana should limit", plain.limitHeader, diana.limitHeader)
	}

	b.Run("local", func(b *testing.B) {
		plain.reset(b.N)
		diana.reset(b.N)
		b.ResetTimer()
		for k := 0; k*proxyRound < b.N; k++ {
			n := min(proxyRound, b.N-k*proxyRound)
			pair := [2]*load{plain, diana}
			if k%2 == 1 {
				pair = [2]*load{diana, plain}
			}
			for _, l := range pair {
				runtime.GC() // the garbage of the previous round is not charged to this one
				l.round(n)
			}
		}
		b.StopTimer()
		for _, l := range []*load{plain, diana} {
			if err := l.err(); err != nil {
				b.Fatalf("%s: %v", l.name, err)
			}
		}
		p, d := plain.stats(), diana.stats()
		b.ReportMetric(0, "ns/op")
		b.ReportMetric(p.rps, "plain-req/s")
		b.ReportMetric(d.rps, "diana-req/s")
		b.ReportMetric(p.p50, "plain-p50-µs")
		b.ReportMetric(d.p50, "diana-p50-µs")
		b.ReportMetric(p.p99, "plain-p99-µs")
		b.ReportMetric(d.p99, "diana-p99-µs")
		b.ReportMetric(p.cpu, "plain-cpu-µs/req")
		b.ReportMetric(d.cpu, "diana-cpu-µs/req")
		b.ReportMetric(d.rps/p.rps, "diana/plain-req/s")
		b.ReportMetric(d.p99/p.p99, "diana/plain-p99")
		b.ReportMetric(d.cpu/p.cpu, "diana/plain-cpu")
	})
}

// startDiana runs dianad with ProxyConfig in front of upstream, and returns its proxy's URL.
func startDiana(b *testing.B, upstream string) string {
	return "http://" + runDianad(b, ProxyConfig("127.0.0.1:0", upstream)).ProxyAddr()
}

// runDianad runs dianad in process with the config yaml until the benchmark ends.
func runDianad(b *testing.B, yaml string) *server.Server {
	cfg, err := server.Parse([]byte(yaml), "bench.yaml")
	if err != nil {
		b.Fatal(err)
	}
	s, err := server.New(cfg, server.Options{Logger: slog.New(slog.DiscardHandler), ShutdownTimeout: 10 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	b.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			b.Errorf("dianad: %v", err)
		}
	})
	return s
}

// startPlain runs the anchor, a plain httputil.ReverseProxy to upstream with dianad's transport,
// Rewrite and server settings (server/proxy.go and server/server.go), and returns its URL.
func startPlain(b *testing.B, upstream string) string {
	target, err := url.Parse(upstream)
	if err != nil {
		b.Fatal(err)
	}
	transport := server.NewTransport() // dianad's own, so that only Diana's work differs
	rp := &httputil.ReverseProxy{Rewrite: server.Rewrite(target), Transport: transport}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{
		Handler:           rp,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          log.New(io.Discard, "", 0),
	}
	go srv.Serve(ln)
	b.Cleanup(func() {
		srv.Close()
		transport.CloseIdleConnections()
	})
	return "http://" + ln.Addr().String()
}

// load is the closed-loop load generator of one target: proxyClients workers, each sending its
// next request as soon as the previous answer is read, over its own keep-alive connections.
type load struct {
	name        string
	transport   *http.Transport
	reqs        [proxyClients][]*http.Request // each worker's requests, sent in turn
	pos         [proxyClients]int             // each worker's last request
	limitHeader string                        // RateLimit-Limit of the last warm-up answer

	lat     []time.Duration // the latency of each timed request
	elapsed time.Duration   // the rounds' total wall time
	cpu     time.Duration   // the process's CPU time (user and system) in the rounds
	mu      sync.Mutex      // guards limitHeader
	failures
}

func newLoad(b *testing.B, name, base string) *load {
	l := &load{name: name, transport: &http.Transport{MaxIdleConnsPerHost: proxyClients, DisableCompression: true}}
	b.Cleanup(l.transport.CloseIdleConnections)
	for i := range ProxyIPs {
		path, xff := ProxyRequest(i)
		req, err := http.NewRequest("GET", base+path, nil)
		if err != nil {
			b.Fatal(err)
		}
		req.Header.Set("X-Forwarded-For", xff)
		l.reqs[i%proxyClients] = append(l.reqs[i%proxyClients], req)
	}
	return l
}

// reset prepares for a run of n timed requests.
func (l *load) reset(n int) {
	l.lat = make([]time.Duration, 0, n)
	l.elapsed, l.cpu, l.failures = 0, 0, failures{}
}

// round sends n timed requests.
func (l *load) round(n int) {
	start, cpu := time.Now(), cpuTime()
	l.run(n, l.lat[len(l.lat):len(l.lat)+n])
	l.elapsed += time.Since(start)
	l.cpu += cpuTime() - cpu
	l.lat = l.lat[:len(l.lat)+n]
}

// run sends n requests and returns when all are answered, recording request i's latency in
// lat[i] (nil: none recorded, but the RateLimit-Limit header kept).
func (l *load) run(n int, lat []time.Duration) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range proxyClients {
		wg.Go(func() {
			reqs := l.reqs[w]
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				l.pos[w] = (l.pos[w] + 1) % len(reqs)
				start := time.Now()
				res, err := l.transport.RoundTrip(reqs[l.pos[w]])
				if err == nil {
					_, err = io.Copy(io.Discard, res.Body)
					res.Body.Close()
					if err == nil && res.StatusCode != http.StatusOK {
						err = errors.New("status " + res.Status)
					}
				}
				d := time.Since(start)
				switch {
				case err != nil:
					l.fail(err)
				case lat != nil:
					lat[i] = d
				default:
					l.mu.Lock()
					l.limitHeader = res.Header.Get("RateLimit-Limit")
					l.mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
}

// failures counts the failed requests of a load, keeping the first error.
type failures struct {
	mu     sync.Mutex
	failed int
	first  error
}

func (f *failures) fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failed++; f.first == nil {
		f.first = err
	}
}

// err reports the failed requests since the last reset, if any.
func (f *failures) err() error {
	if f.failed == 0 {
		return nil
	}
	return fmt.Errorf("%d requests failed, the first with: %w", f.failed, f.first)
}

// loadStats are the figures of a run.
type loadStats struct {
	rps, p50, p99 float64 // requests per second; latencies in µs
	cpu           float64 // CPU µs per request
	redisCPU      float64 // redis-server's CPU µs per request (BenchmarkRLS)
}

func (l *load) stats() loadStats {
	lat := slices.Clone(l.lat)
	slices.Sort(lat)
	// The nearest-rank percentile: the smallest latency at least q of the requests did not exceed.
	pct := func(q float64) float64 {
		i := max(int(math.Ceil(q*float64(len(lat))))-1, 0)
		return float64(lat[i]) / float64(time.Microsecond)
	}
	return loadStats{
		rps: float64(len(lat)) / l.elapsed.Seconds(),
		p50: pct(0.50),
		p99: pct(0.99),
		cpu: float64(l.cpu) / float64(time.Microsecond) / float64(len(lat)),
	}
}

// cpuTime is the CPU time the process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0 // not on this system: the CPU figures read 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkMiddleware measures Diana's work per request on its own, without the network: the
// httplimit middleware with ProxyConfig's three rules in the local store, in front of a
// handler answering 200, beside the bare handler (the anchor). Each request comes from one of
// BenchmarkProxy's client addresses, through a trusted proxy; dianad adds its metrics and the
// choice of the upstream to this.
func BenchmarkMiddleware(b *testing.B) {
	cfg, err := server.Parse([]byte(ProxyConfig("127.0.0.1:0", "http://127.0.0.1:1")), "bench.yaml")
	if err != nil {
		b.Fatal(err)
	}
	e, err := rules.New(cfg.Rules, rules.Options{Local: rules.Each(memstore.New(memstore.Options{}).Decide)})
	if err != nil {
		b.Fatal(err)
	}
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"ok":true}`+"\n") })
	limited := httplimit.New(e, httplimit.Options{TrustedProxies: cfg.TrustedProxies, IPv6Prefix: cfg.IPv6Prefix}).Handler(ok)
	reqs := make([]*http.Request, ProxyIPs)
	for i := range reqs {
		path, xff := ProxyRequest(i)
		reqs[i] = httptest.NewRequest("GET", path, nil)
		reqs[i].RemoteAddr = "127.0.0.1:40000"
		reqs[i].Header.Set("X-Forwarded-For", xff)
	}
	for _, h := range []struct {
		name    string
		handler http.Handler
	}{{"bare", ok}, {"diana", limited}} {
		b.Run(h.name, func(b *testing.B) {
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				w := httptest.NewRecorder()
				h.handler.ServeHTTP(w, reqs[i%ProxyIPs])
				if w.Code != http.StatusOK {
					b.Fatalf("status %d", w.Code)
				}
				i++
			}
		})
	}
}
