package bench

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/diana-gw/diana/internal/gatewaytest"
)

// authConfig is dianad's config for BenchmarkForwardAuth: the decision service only, trusting
// nginx on loopback, one per-IP rule with a limit far above the load.
const authConfig = `version: 1
listen: ""
admin: {listen: "127.0.0.1:0"}
trusted_proxies: ["127.0.0.1/32"]
rules:
  - name: per-ip
    by: [ip]
    limit: {algorithm: token_bucket, rate: 100000, period: 1s, burst: 100000}
`

// BenchmarkForwardAuth measures what asking dianad costs a request through nginx: the shipped
// examples/nginx.conf (auth_request to dianad's /v1/auth on every request) against its anchor,
// the same file with auth_request off, both in a real nginx in front of the same upstream. One
// client on keep-alive connections sends the requests one at a time, alternating the targets
// request by request, so that both see the same machine. An op is one request to each target.
//
// Reported: the p50 and p99 latency of each target as the client sees it (µs), and the ratio
// auth/plain of the p50s: the figure to trust is the ratio of one run.
func BenchmarkForwardAuth(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"ok":true}`+"\n")
	}))
	b.Cleanup(up.Close)
	s := runDianad(b, authConfig)
	conf, err := os.ReadFile("../examples/nginx.conf")
	if err != nil {
		b.Fatal(err)
	}
	nginx := func(auth bool) string {
		port := gatewaytest.Nginx(b, func(port int) string {
			c := strings.NewReplacer("127.0.0.1:9090", s.AdminAddr(), "127.0.0.1:8000", strings.TrimPrefix(up.URL, "http://"),
				"listen 8080;", "listen 127.0.0.1:"+strconv.Itoa(port)+";").Replace(string(conf))
			if !auth {
				c = strings.Replace(c, "auth_request /_diana;", "auth_request off;", 1)
			}
			return c
		})
		return "http://127.0.0.1:" + strconv.Itoa(port) + "/api/items"
	}
	targets := [2]string{nginx(false), nginx(true)}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	get := func(url string) (time.Duration, string) {
		start := time.Now()
		resp, err := client.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		d := time.Since(start)
		if err != nil || resp.StatusCode != 200 {
			b.Fatalf("%s: %d %v", url, resp.StatusCode, err)
		}
		return d, resp.Header.Get("Ratelimit-Limit")
	}
	for range 200 { // connections open, and a check that only the auth target asks dianad
		for i, u := range targets {
			if _, limit := get(u); (limit != "") != (i == 1) {
				b.Fatalf("%s: RateLimit-Limit %q: only the auth_request target should carry it", u, limit)
			}
		}
	}
	lat := [2][]time.Duration{make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)}
	b.ResetTimer()
	for n := range b.N {
		for k := range 2 {
			i := (n + k) % 2 // plain, auth, auth, plain, ...
			d, _ := get(targets[i])
			lat[i] = append(lat[i], d)
		}
	}
	b.StopTimer()
	pct := func(l []time.Duration, p float64) float64 {
		slices.Sort(l)
		return float64(l[int(p*float64(len(l)-1))].Nanoseconds()) / 1e3
	}
	plain50, auth50 := pct(lat[0], 0.5), pct(lat[1], 0.5)
	b.ReportMetric(plain50, "plain-p50-µs")
	b.ReportMetric(auth50, "auth-p50-µs")
	b.ReportMetric(pct(lat[0], 0.99), "plain-p99-µs")
	b.ReportMetric(pct(lat[1], 0.99), "auth-p99-µs")
	b.ReportMetric(auth50/plain50, "auth/plain-p50")
}
