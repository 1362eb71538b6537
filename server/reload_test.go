package server

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/diana-gw/diana/internal/redistest"
)

// limitConfig is a config with one per-IP rule allowing limit requests an hour, and extra
// appended (more top-level keys).
func limitConfig(limit int, extra string) string {
	return header + `trusted_proxies: ["127.0.0.1/32"]
upstreams:
  - name: demo
    url: "demo:"
rules:
  - name: per-ip
    by: [ip]
    limit: {algorithm: token_bucket, rate: ` + strconv.Itoa(limit) + `, period: 1h}
` + extra
}

// limitNow returns the RateLimit-Limit a fresh client sees on path.
func limitNow(t *testing.T, ts *testServer, path string) string {
	n := ts.probes.Add(1)
	ip := fmt.Sprintf("10.%d.%d.%d", n>>16&255, n>>8&255, n&255)
	return get(t, ts.proxy+path, ip).header.Get("RateLimit-Limit")
}

// waitLimit waits until a fresh client sees limit.
func waitLimit(t *testing.T, ts *testServer, limit int) {
	t.Helper()
	eventually(t, "RateLimit-Limit "+strconv.Itoa(limit), func() bool { return limitNow(t, ts, "/") == strconv.Itoa(limit) })
}

// metric returns the value of the /metrics line that starts with series ("0" if absent).
func metric(t *testing.T, ts *testServer, series string) float64 {
	body := get(t, ts.admin+"/metrics", "").body
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		return 0
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatalf("metric %s: %v", series, err)
	}
	return v
}

func TestReload(t *testing.T) {
	ts := startFile(t, limitConfig(3, ""))
	waitLimit(t, ts, 3)

	writeFile(t, ts.file, limitConfig(7, ""))
	ts.Reload()
	waitLimit(t, ts, 7)

	// Live settings change too: the upstreams.
	writeFile(t, ts.file, strings.Replace(limitConfig(8, ""), `url: "demo:"`, `url: "demo:"
    match: {paths: ["/only/**"]}`, 1))
	ts.Reload()
	eventually(t, "limit 8 on /only/x", func() bool { return limitNow(t, ts, "/only/x") == "8" })
	if r := get(t, ts.proxy+"/", "192.0.2.200"); r.status != http.StatusNotFound {
		t.Errorf("/ after the upstream got a match: %d, want 404", r.status)
	}
	if got := metric(t, ts, `diana_config_reloads_total{result="ok",source="file"}`); got < 3 {
		t.Errorf("ok reloads %v, want ≥ 3", got)
	}
}

func TestReloadInvalidKeepsLastGood(t *testing.T) {
	ts := startFile(t, limitConfig(3, ""))
	waitLimit(t, ts, 3)
	bad := []struct{ name, doc string }{
		{"syntax", "version: 1\nrules: [\n"},
		{"unknown key", limitConfig(5, "bogus: 1\n")},
		{"invalid limit", strings.Replace(limitConfig(5, ""), "rate: 5", "rate: 0", 1)},
		{"cluster rule without redis", strings.Replace(limitConfig(5, ""), "by: [ip]", "by: [ip]\n    mode: cluster", 1)},
		{"redis added while running without it", strings.Replace(limitConfig(5, "redis: {addrs: [\"127.0.0.1:1\"]}\n"), "by: [ip]", "by: [ip]\n    mode: cluster", 1)},
		{"empty", ""},
	}
	const errors = `diana_config_reloads_total{result="error",source="file"}`
	for _, b := range bad {
		before := metric(t, ts, errors)
		writeFile(t, ts.file, b.doc)
		ts.Reload()
		eventually(t, b.name+": the error is reported", func() bool { return metric(t, ts, errors) > before })
		if got := limitNow(t, ts, "/"); got != "3" {
			t.Fatalf("%s: limit %q after an invalid file, want the last good 3", b.name, got)
		}
	}
	writeFile(t, ts.file, limitConfig(4, ""))
	ts.Reload()
	waitLimit(t, ts, 4)
}

// TestReloadUnderLoad rewrites the config while clients keep sending requests: every request
// must get 200 or 429, never a 5xx or a connection error.
func TestReloadUnderLoad(t *testing.T) {
	// The loader checks the file every 100ms (remote.interval), so that some changes are found
	// without Reload.
	const poll = "remote: {interval: 100ms}\n"
	ts := startFile(t, limitConfig(5, poll))
	waitLimit(t, ts, 5)

	var stop atomic.Bool
	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	var failures []string
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				// Few clients per worker, so that some hit their limit and some do not.
				r, err := do(http.MethodGet, ts.proxy+"/load", fmt.Sprintf("172.16.%d.%d", w, i%4), nil, "")
				mu.Lock()
				if err != nil {
					failures = append(failures, err.Error())
				} else {
					statuses[r.status]++
				}
				mu.Unlock()
			}
		}()
	}
	for i, limit := range []int{6, 9, 2, 12, 5, 20} {
		writeFile(t, ts.file, limitConfig(limit, poll))
		if i%2 == 0 {
			ts.Reload()
		}
		waitLimit(t, ts, limit)
	}
	stop.Store(true)
	wg.Wait()

	if len(failures) > 0 {
		t.Errorf("%d requests failed, e.g. %s", len(failures), failures[0])
	}
	for status, n := range statuses {
		if status != 200 && status != 429 {
			t.Errorf("%d requests got %d", n, status)
		}
	}
	if statuses[200] == 0 || statuses[429] == 0 {
		t.Errorf("statuses %v: want both 200 and 429", statuses)
	}
	t.Logf("statuses under reload: %v", statuses)
}

// remoteDoc is a remote config: rules only.
func remoteDoc(limit int) string {
	return `version: 1
rules:
  - name: per-ip
    by: [ip]
    limit: {algorithm: token_bucket, rate: ` + strconv.Itoa(limit) + `, period: 1h}
`
}

func TestRemoteHTTP(t *testing.T) {
	var mu sync.Mutex
	doc, status := remoteDoc(9), 200
	var badAuth atomic.Int64
	remote := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer cfg-token" {
			badAuth.Add(1)
		}
		mu.Lock()
		defer mu.Unlock()
		w.WriteHeader(status)
		w.Write([]byte(doc))
	}))
	defer remote.Close()
	set := func(d string, s int) {
		mu.Lock()
		doc, status = d, s
		mu.Unlock()
	}

	ts := startFile(t, limitConfig(3, `remote:
  url: "`+remote.URL+`/diana.yaml"
  headers: {Authorization: "Bearer cfg-token"}
  interval: 100ms
`))
	// The remote wins from the start.
	if got := limitNow(t, ts, "/"); got != "9" {
		t.Errorf("limit %q at start, want the remote's 9", got)
	}
	if got := metric(t, ts, `diana_config_info{source="http"}`); got != 1 {
		t.Errorf(`diana_config_info{source="http"} = %v, want 1`, got)
	}

	set(remoteDoc(10), 200)
	waitLimit(t, ts, 10)

	// A remote document may not hold the server's settings: rejected, the last good one stays.
	const errors = `diana_config_reloads_total{result="error",source="http"}`
	before := metric(t, ts, errors)
	set(limitConfig(11, ""), 200)
	eventually(t, "the invalid remote document is reported", func() bool { return metric(t, ts, errors) > before })
	if got := limitNow(t, ts, "/"); got != "10" {
		t.Errorf("limit %q after an invalid remote document, want 10", got)
	}

	// A file change applies its settings but not its rules while the remote's rules apply.
	writeFile(t, ts.file, strings.Replace(limitConfig(4, `remote:
  url: "`+remote.URL+`/diana.yaml"
  headers: {Authorization: "Bearer cfg-token"}
  interval: 100ms
`), `url: "demo:"`, `url: "demo:"
    match: {paths: ["/only/**"]}`, 1))
	ts.Reload()
	eventually(t, "the file's upstreams apply", func() bool {
		return get(t, ts.proxy+"/", "192.0.2.201").status == http.StatusNotFound
	})
	if got := limitNow(t, ts, "/only/x"); got != "10" {
		t.Errorf("limit %q with the remote up, want the remote's 10", got)
	}

	// The remote has no document: its last valid rules stay (a failing config server must not
	// swap the rules), and the failure is counted.
	before = metric(t, ts, errors)
	set("", http.StatusNotFound)
	eventually(t, "the 404 is counted", func() bool { return metric(t, ts, errors) > before })
	if got := limitNow(t, ts, "/only/x"); got != "10" {
		t.Errorf("limit %q with the remote answering 404, want the remote's last 10", got)
	}
	if got := metric(t, ts, `diana_config_info{source="http"}`); got != 1 {
		t.Errorf(`diana_config_info{source="http"} = %v, want 1`, got)
	}
	if n := badAuth.Load(); n > 0 {
		t.Errorf("%d remote requests lacked the configured Authorization header", n)
	}
}

func TestRemoteRedis(t *testing.T) {
	rs := redistest.Start(t)
	rc := rs.Client()
	defer rc.Close()
	ctx := context.Background()
	if err := rc.Set(ctx, "diana:config", remoteDoc(9), 0).Err(); err != nil {
		t.Fatal(err)
	}
	// The interval is long: changes must come through the pub/sub channel.
	ts := startFile(t, limitConfig(3, `redis:
  addrs: ["`+rs.Addr+`"]
remote:
  redis_key: "diana:config"
  interval: 1h
`))
	if got := limitNow(t, ts, "/"); got != "9" {
		t.Errorf("limit %q at start, want the remote's 9", got)
	}
	eventually(t, "the new document announced on the channel applies", func() bool {
		// Publish until the subscription is up and the change is seen.
		rc.Set(ctx, "diana:config", remoteDoc(12), 0)
		rc.Publish(ctx, "diana:config", "changed")
		return limitNow(t, ts, "/") == "12"
	})
	// The key is deleted: the remote's last rules stay.
	const errors = `diana_config_reloads_total{result="error",source="redis"}`
	before := metric(t, ts, errors)
	rc.Del(ctx, "diana:config")
	rc.Publish(ctx, "diana:config", "deleted")
	eventually(t, "the missing key is counted", func() bool { return metric(t, ts, errors) > before })
	if got := limitNow(t, ts, "/"); got != "12" {
		t.Errorf("limit %q with the key gone, want the remote's last 12", got)
	}
}
