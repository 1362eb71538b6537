package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMain lets the test binary serve the roles measure starts it in (upstream, plain, pooled).
func TestMain(m *testing.M) {
	serveRole()
	os.Exit(m.Run())
}

// 200 requests through the anchor, a plain ReverseProxy in its own process, to the upstream,
// by the Go load generator: every one answered 200 and timed.
func TestGoLoad(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	launch := func(env ...string) string {
		addr, err := freeAddr()
		if err != nil {
			t.Fatal(err)
		}
		p, err := start(dir, strings.TrimPrefix(env[0], roleEnv+"="), addr, append(env, listenEnv+"="+addr), self)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.stop)
		return "http://" + addr
	}
	up := launch(roleEnv + "=upstream")
	plain := launch(roleEnv+"=plain", upstreamEnv+"="+up)
	r, err := goLoad(plain, 4, 200, 0)
	if err != nil {
		t.Fatal(err)
	}
	if r.Requests != 200 || r.Errors != 0 || r.P50 <= 0 || r.P99 < r.P50 || r.RPS <= 0 {
		t.Errorf("got %+v, want 200 requests, no error, 0 < p50 <= p99", r)
	}
}

// The whole command with the Go load generator, without dianad and nginx: the report names
// each target with its figures, the anchor's ratios are 1, and the JSON holds the same.
func TestRun(t *testing.T) {
	file := filepath.Join(t.TempDir(), "proxy.json")
	var out, errs strings.Builder
	args := []string{"-driver", "go", "-conns", "4", "-dianad", "", "-nginx=false", "-duration", "300ms", "-warmup", "100ms", "-rounds", "2", "-json", file}
	if code := run(args, &out, &errs); code != 0 {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Targets) != 2 || rep.Targets[0].Name != "plain" || rep.Targets[1].Name != "pooled" || rep.Rounds != 2 {
		t.Fatalf("targets %+v, rounds %d: want plain and pooled, 2 rounds", rep.Targets, rep.Rounds)
	}
	for _, tg := range rep.Targets {
		if len(tg.RoundRuns) != 2 || tg.RPS <= 0 || tg.P99 <= 0 || tg.CPU <= 0 {
			t.Errorf("%s: %+v: want 2 rounds and figures above 0", tg.Name, tg)
		}
		if !strings.Contains(out.String(), tg.Name) {
			t.Errorf("the table lacks %s:\n%s", tg.Name, out.String())
		}
	}
	if a := rep.Targets[0]; a.RPSRatio != (Spread{Median: 1, Min: 1, Max: 1}) || a.P99Ratio != (Spread{Median: 1, Min: 1, Max: 1}) {
		t.Errorf("the anchor's ratios: %+v %+v, want 1", a.RPSRatio, a.P99Ratio)
	}
}

// parseWrk reads the line wrkScript's done prints, amid wrk's own output.
func TestParseWrk(t *testing.T) {
	for _, tc := range []struct {
		out     string
		want    result
		wantErr string
	}{
		{
			out:  "Running 5s test @ http://127.0.0.1:1\n  2 threads and 32 connections\nPROXYLOAD {\"requests\":50000,\"duration_us\":5000000,\"errors\":3,\"p50_us\":1200,\"p99_us\":9000}\n",
			want: result{Requests: 50000, Seconds: 5, RPS: 10000, P50: 1200, P99: 9000, Errors: 3},
		},
		{out: "Running 5s test\n", wantErr: "no figures"},
		{out: "PROXYLOAD {\"requests\":0,\"duration_us\":5000000}\n", wantErr: "no requests"},
		{out: "PROXYLOAD {\"requests\":\n", wantErr: "wrk's figures"},
	} {
		got, err := parseWrk(tc.out)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: error %v, want one with %q", tc.out, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: got %+v, %v; want %+v", tc.out, got, err, tc.want)
		}
	}
}

// The wrk script sends the whole mix of bench.ProxyRequest, each request once a cycle.
func TestWrkScript(t *testing.T) {
	if n := strings.Count(wrkScript, `"/api/items/`); n != 1000 {
		t.Errorf("%d requests in the mix, want 1000", n)
	}
	for _, want := range []string{`{"/api/items/0", "10.0.0.0"}`, `{"/api/items/7", "10.0.3.231"}`} {
		if !strings.Contains(wrkScript, want) {
			t.Errorf("the script lacks %s", want)
		}
	}
}
