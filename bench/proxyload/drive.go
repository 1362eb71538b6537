package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/diana-gw/diana/bench"
)

// result is what one run of the load against one target measured.
type result = bench.ProxyRun

// wrkScript sends bench.ProxyRequest's mix (each wrk thread cycling through it) and prints the
// run's figures as one JSON line: latencies in µs, the duration in µs.
var wrkScript = func() string {
	var b strings.Builder
	b.WriteString("local reqs = {}\nlocal n = 0\ninit = function(args)\n")
	b.WriteString("  local mix = {\n")
	for i := range bench.ProxyIPs {
		path, xff := bench.ProxyRequest(i)
		fmt.Fprintf(&b, "    {%q, %q},\n", path, xff)
	}
	b.WriteString(`  }
  for i, m in ipairs(mix) do
    reqs[i] = wrk.format("GET", m[1], {["X-Forwarded-For"] = m[2]})
  end
end
request = function()
  n = n % #reqs + 1
  return reqs[n]
end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('PROXYLOAD {"requests":%d,"duration_us":%d,"errors":%d,"p50_us":%d,"p99_us":%d}\n',
    summary.requests, summary.duration, e.connect + e.read + e.write + e.status + e.timeout,
    latency:percentile(50), latency:percentile(99)))
end
`)
	return b.String()
}()

// runWrk runs wrk (threads, conns) against url for d, rounded up to whole seconds (wrk's unit),
// with script (a file holding wrkScript).
func runWrk(url string, d time.Duration, threads, conns int, script string) (result, error) {
	secs := max(int((d+time.Second-1)/time.Second), 1)
	cmd := exec.Command("wrk", "-t", strconv.Itoa(threads), "-c", strconv.Itoa(conns),
		"-d", strconv.Itoa(secs)+"s", "--timeout", "5s", "-s", script, url)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return result{}, fmt.Errorf("wrk: %w: %s", err, out.String())
	}
	r, err := parseWrk(out.String())
	if err != nil {
		return result{}, err
	}
	cpu := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	r.DriverCPU = cpu.Seconds() / r.Seconds
	return r, nil
}

// parseWrk reads the figures wrkScript's done prints from wrk's output.
func parseWrk(out string) (result, error) {
	_, line, ok := strings.Cut(out, "PROXYLOAD ")
	if !ok {
		return result{}, fmt.Errorf("wrk printed no figures: %s", out)
	}
	line, _, _ = strings.Cut(line, "\n")
	var w struct {
		Requests   int     `json:"requests"`
		DurationUS float64 `json:"duration_us"`
		Errors     int     `json:"errors"`
		P50        float64 `json:"p50_us"`
		P99        float64 `json:"p99_us"`
	}
	if err := json.Unmarshal([]byte(line), &w); err != nil {
		return result{}, fmt.Errorf("wrk's figures %q: %w", line, err)
	}
	if w.Requests == 0 || w.DurationUS <= 0 {
		return result{}, fmt.Errorf("wrk made no requests: %s", out)
	}
	s := w.DurationUS / 1e6
	return result{Requests: w.Requests, Seconds: s, RPS: float64(w.Requests) / s, P50: w.P50, P99: w.P99, Errors: w.Errors}, nil
}

// goLoad is the Go load generator: conns closed-loop clients, each on its own keep-alive
// connection sending its next request as soon as the previous answer is read, through
// bench.ProxyRequest's mix, until n requests (n > 0) or for d. It is the fallback when wrk is
// missing, and the smoke test's.
func goLoad(url string, conns, n int, d time.Duration) (result, error) {
	tr := &http.Transport{MaxIdleConnsPerHost: conns, DisableCompression: true}
	defer tr.CloseIdleConnections()
	reqs := make([]*http.Request, bench.ProxyIPs)
	for i := range reqs {
		path, xff := bench.ProxyRequest(i)
		req, err := http.NewRequest("GET", url+path, nil)
		if err != nil {
			return result{}, err
		}
		req.Header.Set("X-Forwarded-For", xff)
		reqs[i] = req
	}
	var (
		mu     sync.Mutex
		lat    []time.Duration
		errs   int
		first  error
		wg     sync.WaitGroup
		issued = make(chan struct{}, max(n, 0))
	)
	for range n {
		issued <- struct{}{}
	}
	close(issued)
	stop := time.Now().Add(d)
	begin, cpu0 := time.Now(), cpuTime()
	for w := range conns {
		wg.Go(func() {
			var mine []time.Duration
			var bad int
			var firstBad error
			for i := w; ; i += conns {
				if n > 0 {
					if _, ok := <-issued; !ok {
						break
					}
				} else if time.Now().After(stop) {
					break
				}
				t := time.Now()
				res, err := tr.RoundTrip(reqs[i%len(reqs)])
				if err == nil {
					_, err = io.Copy(io.Discard, res.Body)
					res.Body.Close()
					if err == nil && res.StatusCode != http.StatusOK {
						err = errors.New("status " + res.Status)
					}
				}
				if err != nil {
					if bad++; firstBad == nil {
						firstBad = err
					}
					continue
				}
				mine = append(mine, time.Since(t))
			}
			mu.Lock()
			defer mu.Unlock()
			lat = append(lat, mine...)
			if errs += bad; first == nil {
				first = firstBad
			}
		})
	}
	wg.Wait()
	s := time.Since(begin).Seconds()
	if len(lat) == 0 {
		return result{}, fmt.Errorf("no request answered (%d failed, the first with %v)", errs, first)
	}
	slices.Sort(lat)
	// The nearest-rank percentile: the smallest latency at least q of the requests did not exceed.
	pct := func(q float64) float64 {
		i := min(max(int(float64(len(lat))*q+0.999999)-1, 0), len(lat)-1)
		return float64(lat[i]) / float64(time.Microsecond)
	}
	return result{
		Requests: len(lat), Seconds: s, RPS: float64(len(lat)) / s, P50: pct(0.50), P99: pct(0.99),
		Errors: errs, DriverCPU: (cpuTime() - cpu0).Seconds() / s,
	}, nil
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		fmt.Fprintln(os.Stderr, "proxyload: getrusage:", err)
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
