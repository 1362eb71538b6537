package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	kpp "github.com/Kong/go-pdk/server/kong_plugin_protocol"
	"google.golang.org/protobuf/proto"

	"github.com/diana-gw/diana/internal/logbuf"
	"github.com/diana-gw/diana/internal/redistest"
)

// The end-to-end tests build the real binary, start it as Kong does (-kong-prefix), and speak
// kong_plugin_protocol over its unix socket: StartInstance with Kong's extra config keys, then
// HandleEvent "access", answering each PDK call (answer, in kong_test.go).

var builds sync.Map // package path → *buildResult

type buildResult struct {
	once sync.Once
	dir  string
	err  error
}

// build builds pkg into a binary named name, once per test run.
func build(t testing.TB, pkg, name string) string {
	t.Helper()
	v, _ := builds.LoadOrStore(pkg, &buildResult{})
	b := v.(*buildResult)
	b.once.Do(func() {
		b.dir, b.err = os.MkdirTemp("", "diana-kong-e2e")
		if b.err != nil {
			return
		}
		out, err := exec.Command("go", "build", "-o", filepath.Join(b.dir, name), pkg).CombinedOutput()
		if err != nil {
			b.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return filepath.Join(b.dir, name)
}

func TestMain(m *testing.M) {
	code := m.Run()
	builds.Range(func(_, v any) bool {
		if d := v.(*buildResult).dir; d != "" {
			os.RemoveAll(d)
		}
		return true
	})
	os.Exit(code)
}

// pluginServer is a running plugin binary, as Kong's worker 0 starts it.
type pluginServer struct {
	t      testing.TB
	socket string
	seq    int64
	inst   int      // the last __seq__: Kong numbers instances across all plugins, and go-pdk uses it as the instance id
	conn   net.Conn // reopened after each exit, which closes it (go-pdk's Response.Exit)
	cmd    *exec.Cmd
	logs   *logbuf.Buffer // what it wrote to its standard error (Kong's error log)
}

func startServer(t testing.TB, bin string, args ...string) *pluginServer {
	t.Helper()
	return startServerIn(t, t.TempDir(), bin, args...)
}

// startServerIn starts the plugin server with -kong-prefix prefix, where its socket is.
func startServerIn(t testing.TB, prefix, bin string, args ...string) *pluginServer {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"-kong-prefix", prefix}, args...)...)
	logs := &logbuf.Buffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("plugin server log:\n%s", logs.String())
		}
	})
	s := &pluginServer{t: t, socket: filepath.Join(prefix, filepath.Base(bin)+".socket"), cmd: cmd, logs: logs}
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := net.Dial("unix", s.socket)
		if err == nil {
			s.conn = c
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no socket %s after 20s: %v", s.socket, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Cleanup(func() { s.conn.Close() })
	return s
}

// kill kills the plugin server, as a crash would.
func (s *pluginServer) kill() {
	s.cmd.Process.Kill()
	s.cmd.Wait()
}

func (s *pluginServer) call(c *kpp.RpcCall) *kpp.RpcReturn {
	s.t.Helper()
	s.seq++
	c.Sequence = s.seq
	b, err := proto.Marshal(c)
	if err != nil {
		s.t.Fatal(err)
	}
	s.conn.SetDeadline(time.Now().Add(30 * time.Second))
	if err := writeFrame(s.conn, b); err != nil {
		s.t.Fatal(err)
	}
	rb, err := readFrame(s.conn)
	if err != nil {
		s.t.Fatal(err)
	}
	var r kpp.RpcReturn
	if err := proto.Unmarshal(rb, &r); err != nil {
		s.t.Fatal(err)
	}
	return &r
}

// start starts an instance (one nginx worker's) of plugin pluginID with cfg plus the keys Kong
// adds; it returns the instance id.
func (s *pluginServer) start(cfg map[string]any, pluginID string) int32 {
	s.t.Helper()
	s.inst++
	seq := s.inst
	full := map[string]any{"route_id": nil, "service_id": nil, "consumer_id": nil, "__plugin_id": pluginID,
		"__seq__": seq, "__key__": "plugins:" + pluginID + "::::", "__ws_id": "ws-default", "plugin_instance_name": nil}
	for k, v := range cfg {
		full[k] = v
	}
	b, _ := json.Marshal(full)
	r := s.call(&kpp.RpcCall{Call: &kpp.RpcCall_CmdStartInstance{CmdStartInstance: &kpp.CmdStartInstance{Name: "diana", Config: b}}})
	st := r.GetInstanceStatus()
	if st == nil {
		s.t.Fatalf("StartInstance returned %v", r)
	}
	return st.InstanceId
}

// access runs one access event of instance id for r.
func (s *pluginServer) access(id int32, r *kongReq) kongResult { return s.event(id, "access", r) }

// event runs one event (access, log) of instance id for r.
func (s *pluginServer) event(id int32, name string, r *kongReq) kongResult {
	s.t.Helper()
	res, err := s.tryEvent(id, name, r)
	if err != nil {
		s.t.Fatal(err)
	}
	return res
}

// tryEvent is event for a goroutine other than the test's, which must not call t.Fatal.
func (s *pluginServer) tryEvent(id int32, name string, r *kongReq) (kongResult, error) {
	s.seq++
	b, _ := proto.Marshal(&kpp.RpcCall{Sequence: s.seq, Call: &kpp.RpcCall_CmdHandleEvent{CmdHandleEvent: &kpp.CmdHandleEvent{InstanceId: id, EventName: name}}})
	s.conn.SetDeadline(time.Now().Add(30 * time.Second))
	if err := writeFrame(s.conn, b); err != nil {
		return kongResult{}, fmt.Errorf("%s event: %w", name, err)
	}
	res, closed, err := answer(s.conn, r, true)
	if err != nil {
		return res, fmt.Errorf("%s event: %w", name, err)
	}
	if closed { // after kong.response.exit go-pdk closes the connection; Kong opens another
		s.conn.Close()
		if s.conn, err = net.Dial("unix", s.socket); err != nil {
			return res, fmt.Errorf("reconnecting after an exit: %w", err)
		}
	}
	return res, nil
}

// worker opens another connection to the plugin server, as each nginx worker of a Kong node
// has its own; events on it may run beside the others'.
func (s *pluginServer) worker() *pluginServer {
	s.t.Helper()
	c, err := net.Dial("unix", s.socket)
	if err != nil {
		s.t.Fatal(err)
	}
	w := &pluginServer{t: s.t, socket: s.socket, conn: c}
	s.t.Cleanup(func() { w.conn.Close() })
	return w
}

func TestE2E(t *testing.T) {
	bin := build(t, "github.com/diana-gw/diana/kongplugin", "diana")

	t.Run("dump", func(t *testing.T) {
		out, err := exec.Command(bin, "-dump", "-kong-prefix", "/usr/local/kong").Output()
		if err != nil {
			t.Fatal(err)
		}
		want, _ := dumpInfo("/usr/local/kong/diana.socket")
		if !bytes.Equal(out, want) {
			t.Fatalf("binary -dump differs from dumpInfo:\n%s", out)
		}
	})

	s := startServer(t, bin)
	// A header the limit counts by, given twice, is refused with 400 naming it: which value
	// counts would be a guess, and the upstream may read the other one. An exhausted key
	// cannot be spent again behind a fresh one.
	t.Run("repeated identity header", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			cfg    map[string]any
			header string
		}{
			{"header", map[string]any{"limit_by": "header", "header_name": "X-Api-Key"}, "x-api-key"},
			{"device", map[string]any{"limit_by": "global", "limit": 1000, "device_limit": 1}, "x-device-id"},
		} {
			tc.cfg["algorithm"], tc.cfg["window"] = "fixed_window", "1h"
			if tc.cfg["limit"] == nil {
				tc.cfg["limit"] = 1
			}
			id := s.start(tc.cfg, "e2e-repeated-"+tc.name)
			if res := s.access(id, &kongReq{IP: "192.0.2.9", Headers: map[string]string{tc.header: "victim"}}); res.Exit {
				t.Fatalf("%s: first request refused: %+v", tc.name, res)
			}
			if res := s.access(id, &kongReq{IP: "192.0.2.9", Headers: map[string]string{tc.header: "victim"}}); !res.Exit || res.Status != 429 {
				t.Fatalf("%s: second request: %+v, want 429", tc.name, res)
			}
			res := s.access(id, &kongReq{IP: "192.0.2.9", Headers: map[string]string{tc.header: "fresh"}, Again: map[string][]string{tc.header: {"victim"}}})
			if !res.Exit || res.Status != 400 || !strings.Contains(strings.ToLower(res.Body), tc.header) {
				t.Errorf("%s: the header given twice: %+v, want 400 naming it", tc.name, res)
			}
		}
	})
	t.Run("per IP", func(t *testing.T) {
		id := s.start(map[string]any{"algorithm": "fixed_window", "limit": 3, "window": "1h"}, "e2e-ip")
		for _, ip := range []string{"192.0.2.1", "192.0.2.2", "198.51.100.7"} {
			for i := 1; i <= 5; i++ {
				res := s.access(id, &kongReq{IP: ip})
				if i <= 3 {
					if res.Exit || !reflect.DeepEqual(res.Calls, []string{"kong.client.get_forwarded_ip", "kong.response.set_headers"}) {
						t.Fatalf("%s request %d: %+v", ip, i, res)
					}
					if got := res.Headers["Ratelimit-Remaining"]; len(got) != 1 || got[0] != fmt.Sprint(3-i) {
						t.Fatalf("%s request %d: RateLimit-Remaining %v", ip, i, got)
					}
					continue
				}
				if !res.Exit || res.Status != 429 || len(res.Calls) != 2 || res.Headers["Retry-After"] == nil {
					t.Fatalf("%s request %d: want a 429 exit, got %+v", ip, i, res)
				}
			}
		}
	})

	t.Run("header", func(t *testing.T) {
		id := s.start(map[string]any{"limit_by": "header", "header_name": "X-Api-Key", "limit": 2, "window": "1h"}, "e2e-header")
		for i, key := range []string{"k1", "k1", "k2", "k1", ""} {
			res := s.access(id, &kongReq{IP: "192.0.2.9", Headers: map[string]string{"x-api-key": key}})
			if want := i == 3; res.Exit != want {
				t.Fatalf("request %d (key %q): exit %v, want %v", i, key, res.Exit, want)
			}
		}
	})

	t.Run("two workers share a limit", func(t *testing.T) {
		cfg := map[string]any{"algorithm": "sliding_log", "limit": 4, "window": "1h"}
		w1, w2 := s.start(cfg, "e2e-shared"), s.start(cfg, "e2e-shared")
		if w1 == w2 {
			t.Fatalf("one instance id %d for two workers", w1)
		}
		admitted := 0
		for i := 0; i < 8; i++ {
			id := w1
			if i%2 == 1 {
				id = w2
			}
			if !s.access(id, &kongReq{IP: "203.0.113.5"}).Exit {
				admitted++
			}
		}
		if admitted != 4 {
			t.Fatalf("admitted %d across two workers, want 4", admitted)
		}
	})

	t.Run("invalid config fails open, loudly", func(t *testing.T) {
		id := s.start(map[string]any{"window": "sixty"}, "e2e-bad")
		for i := 0; i < 3; i++ {
			res := s.access(id, &kongReq{IP: "192.0.2.1"})
			want := []string{"kong.log.err"} // once a second
			if i > 0 {
				want = nil
			}
			if res.Exit || !reflect.DeepEqual(res.Calls, want) {
				t.Fatalf("request %d: %+v, want only the calls %q", i, res, want)
			}
		}
	})

	t.Run("leased across two Kong nodes", func(t *testing.T) {
		// Two plugin processes, as on two Kong nodes, share one Redis limit in batched mode:
		// never above the limit, with a Redis call per batch rather than per request.
		r := redistest.Start(t)
		host, port, _ := net.SplitHostPort(r.Addr)
		cfg := map[string]any{"policy": "redis", "redis_host": host, "redis_port": json.Number(port), "redis_timeout": 500,
			"algorithm": "fixed_window", "limit": 100, "window": "1h", "batch_max": 20}
		nodes := []*pluginServer{s, startServer(t, bin)}
		ids := []int32{nodes[0].start(cfg, "e2e-leased"), nodes[1].start(cfg, "e2e-leased")}
		admitted := 0
		for i := range 300 {
			if !nodes[i%2].access(ids[i%2], &kongReq{IP: "192.0.2.77"}).Exit {
				admitted++
			}
		}
		stats, err := r.CommandStats(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		calls := stats["evalsha"].Calls + stats["eval"].Calls
		t.Logf("leased: %d of 300 admitted with %d Redis calls", admitted, calls)
		if admitted > 100 || admitted < 60 {
			t.Fatalf("admitted %d, want at most the limit of 100 and most of it", admitted)
		}
		if calls > 40 {
			t.Fatalf("%d Redis calls for 300 requests: batches are not used", calls)
		}
	})

	// The connection is built by store/stack as dianad's: a private CA from redis_ssl_ca_file,
	// WAIT from redis_wait_replicas. A CA file that cannot be read fails every decision, logged.
	t.Run("redis tls and wait", func(t *testing.T) {
		r := redistest.StartWith(t, redistest.Options{TLS: true})
		host, port, _ := net.SplitHostPort(r.Addr)
		p, _ := strconv.Atoi(port)
		cfg := func(extra map[string]any) map[string]any {
			c := map[string]any{"policy": "redis", "redis_host": host, "redis_port": p, "redis_ssl": true,
				"redis_ssl_ca_file": r.CAFile, "algorithm": "fixed_window", "limit": 2, "window": "1h", "redis_timeout": 2000}
			for k, v := range extra {
				c[k] = v
			}
			return c
		}
		id := s.start(cfg(nil), "e2e-tls")
		for i, want := range []bool{false, false, true} {
			if res := s.access(id, &kongReq{IP: "192.0.2.60"}); res.Exit != want || len(res.Logs) != 0 {
				t.Fatalf("private CA, request %d: exit %v logs %q, want exit %v from Redis", i+1, res.Exit, res.Logs, want)
			}
		}
		id = s.start(cfg(map[string]any{"redis_ssl_ca_file": "/nonexistent/ca.pem"}), "e2e-tls-noca")
		if res := s.access(id, &kongReq{IP: "192.0.2.61"}); res.Exit || len(res.Logs) != 1 || !strings.Contains(res.Logs[0], "redis_ssl_ca_file") {
			t.Fatalf("unreadable CA file: %+v, want let through (fail open) with an error naming redis_ssl_ca_file", res)
		}
		// A Redis that asks for client certificates: the pair from redis_ssl_cert_file and
		// redis_ssl_key_file is presented; without it, Redis refuses, and the request is logged.
		m := redistest.StartWith(t, redistest.Options{TLS: true, ClientAuth: true})
		mhost, mport, _ := net.SplitHostPort(m.Addr)
		mp, _ := strconv.Atoi(mport)
		mtls := map[string]any{"redis_host": mhost, "redis_port": mp, "redis_ssl_ca_file": m.CAFile,
			"redis_ssl_cert_file": m.ClientCertFile, "redis_ssl_key_file": m.ClientKeyFile}
		id = s.start(cfg(mtls), "e2e-mtls")
		for i, want := range []bool{false, false, true} {
			if res := s.access(id, &kongReq{IP: "192.0.2.63"}); res.Exit != want || len(res.Logs) != 0 {
				t.Fatalf("mutual TLS, request %d: exit %v logs %q, want exit %v from Redis", i+1, res.Exit, res.Logs, want)
			}
		}
		delete(mtls, "redis_ssl_cert_file")
		delete(mtls, "redis_ssl_key_file")
		id = s.start(cfg(mtls), "e2e-mtls-nocert")
		if res := s.access(id, &kongReq{IP: "192.0.2.64"}); res.Exit || len(res.Logs) != 1 {
			t.Fatalf("no client certificate: %+v, want let through (fail open), logged", res)
		}
		// No replica answers WAIT: with fail_closed, every decision is refused.
		id = s.start(cfg(map[string]any{"redis_wait_replicas": 1, "fail_closed": true, "redis_timeout": 100}), "e2e-wait")
		if res := s.access(id, &kongReq{IP: "192.0.2.62"}); !res.Exit || len(res.Logs) != 1 {
			t.Fatalf("WAIT with no replica: %+v, want refused by fail_closed, logged", res)
		}
	})

	t.Run("redis outage", func(t *testing.T) {
		r := redistest.Start(t)
		host, port, _ := net.SplitHostPort(r.Addr)
		cfg := func(closed bool) map[string]any {
			return map[string]any{"policy": "redis", "redis_host": host, "redis_port": json.Number(port), "fail_closed": closed,
				"algorithm": "token_bucket", "limit": 2, "window": "1h", "redis_timeout": 200}
		}
		open, closed := s.start(cfg(false), "e2e-redis-open"), s.start(cfg(true), "e2e-redis-closed")
		// Up: the shared limit holds, across two workers.
		open2 := s.start(cfg(false), "e2e-redis-open")
		for i, want := range []bool{false, false, true} {
			id := open
			if i == 1 {
				id = open2
			}
			if res := s.access(id, &kongReq{IP: "192.0.2.50"}); res.Exit != want {
				t.Fatalf("redis up, request %d: exit %v, want %v (%+v)", i, res.Exit, want, res)
			}
		}
		r.Stop()
		for i := 0; i < 5; i++ {
			if res := s.access(open, &kongReq{IP: "192.0.2.51"}); res.Exit || res.Headers != nil {
				t.Fatalf("redis down, fail open, request %d: %+v (want admitted, no made-up headers)", i, res)
			}
			if res := s.access(closed, &kongReq{IP: "192.0.2.51"}); !res.Exit || res.Status != 429 {
				t.Fatalf("redis down, fail_closed, request %d: %+v", i, res)
			}
		}
	})
}

// BenchmarkRequest measures, over the real protocol, what one allowed request of a per-IP limit
// costs the plugin server: the events Kong sends for it (access, and log where the plugin
// declares that phase) against an empty go-pdk plugin (access alone), with the PDK calls made:
//
//	go test -run '^$' -bench Request ./kongplugin
func BenchmarkRequest(b *testing.B) {
	for _, p := range []struct {
		name, pkg string
		args      []string
		events    []string
	}{
		{"empty", "github.com/diana-gw/diana/kongplugin/testdata/empty", nil, []string{"access"}},
		{"diana", "github.com/diana-gw/diana/kongplugin", nil, []string{"access", "log"}},
		{"diana-no-log-phase", "github.com/diana-gw/diana/kongplugin", []string{"-no-log-phase"}, []string{"access"}},
	} {
		b.Run(p.name, func(b *testing.B) {
			name := "diana"
			if p.name == "empty" {
				name = "diana-empty"
			}
			s := startServer(b, build(b, p.pkg, name), p.args...)
			id := s.start(map[string]any{}, "bench") // the defaults: 60 per minute per IP; each IP comes once
			calls := 0
			r := &kongReq{}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				r.IP = fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
				for _, ev := range p.events {
					res := s.event(id, ev, r)
					if res.Exit {
						b.Fatal("denied")
					}
					calls += len(res.Calls)
				}
			}
			if p.name != "empty" && calls != 2*b.N {
				b.Fatalf("%d PDK calls in %d requests, want 2 each", calls, b.N)
			}
			b.ReportMetric(float64(calls)/float64(b.N), "pdk-calls/op")
		})
	}
}

// A plugin server started with -no-log-phase declares the access phase alone, its schema offers
// no algorithm that holds leases, and a config that asks for one is refused naming the field
// (with fail_closed, a 503), while other limits work.
func TestNoLogPhase(t *testing.T) {
	bin := build(t, "github.com/diana-gw/diana/kongplugin", "diana")
	out, err := exec.Command(bin, "-dump", "-no-log-phase").Output()
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Plugins []struct {
			Phases []string
			Schema struct{ Fields []map[string]map[string]any }
		}
	}
	if err := json.Unmarshal(out, &info); err != nil {
		t.Fatal(err)
	}
	if p := info.Plugins[0]; !reflect.DeepEqual(p.Phases, []string{"access"}) {
		t.Errorf("phases %v, want access alone", p.Phases)
	}
	var algorithms []any
	for _, f := range info.Plugins[0].Schema.Fields[0]["config"]["fields"].([]any) {
		if a, ok := f.(map[string]any)["algorithm"]; ok {
			algorithms, _ = a.(map[string]any)["one_of"].([]any)
		}
	}
	if !slices.Contains(algorithms, any("sliding_window")) || slices.Contains(algorithms, any("concurrency")) {
		t.Errorf("the dump's algorithms %v: want sliding_window and no concurrency", algorithms)
	}

	s := startServer(t, bin, "-no-log-phase")
	id := s.start(map[string]any{"algorithm": "concurrency", "limit": 5, "fail_closed": true}, "nolog-conc")
	if res := s.access(id, &kongReq{IP: "192.0.2.40"}); !res.Exit || res.Status != 503 || len(res.Logs) != 1 ||
		!strings.Contains(res.Logs[0], "algorithm: concurrency needs Kong's log phase") {
		t.Errorf("concurrency without the log phase: %+v, want a 503 and the reason logged", res)
	}
	id = s.start(map[string]any{"algorithm": "fixed_window", "limit": 1, "window": "1h"}, "nolog-fw")
	if res := s.access(id, &kongReq{IP: "192.0.2.41"}); res.Exit {
		t.Errorf("first request: %+v", res)
	}
	if res := s.access(id, &kongReq{IP: "192.0.2.41"}); !res.Exit || res.Status != 429 {
		t.Errorf("second request: %+v, want 429", res)
	}
}

// The paths where a request passes unlimited leave a line in Kong's error log, through the
// PDK, at most one a second per instance: a shadow rule's would-be denial, a Redis failure under
// fault tolerance; an invalid config (which Kong's schema should have refused) logs an error and,
// with fail_closed, refuses the request.
func TestUnlimitedPathsLog(t *testing.T) {
	bin := build(t, "github.com/diana-gw/diana/kongplugin", "diana")
	s := startServer(t, bin)
	logsOf := func(id int32, n int, r *kongReq) (all []string, last kongResult) {
		for range n {
			last = s.access(id, r)
			all = append(all, last.Logs...)
		}
		return all, last
	}

	t.Run("shadow", func(t *testing.T) {
		id := s.start(map[string]any{"algorithm": "fixed_window", "limit": 1, "window": "1h", "shadow": true}, "log-shadow")
		logs, last := logsOf(id, 20, &kongReq{IP: "192.0.2.31"})
		if last.Exit || len(logs) != 1 || logs[0] != "warn: diana: shadow rule log-shadow.main.fixed_window would deny client 192.0.2.31 (0 more since the last line)" {
			t.Fatalf("20 requests, 19 over a shadow limit: exit %v, logs %q; want none refused and one warning", last.Exit, logs)
		}
		time.Sleep(time.Second)
		if logs, _ := logsOf(id, 1, &kongReq{IP: "192.0.2.31"}); len(logs) != 1 || !strings.Contains(logs[0], "(18 more since the last line)") {
			t.Fatalf("a second later: logs %q; want one counting the 18 held back", logs)
		}
	})

	t.Run("redis down", func(t *testing.T) {
		id := s.start(map[string]any{"algorithm": "fixed_window", "limit": 5, "window": "1h", "policy": "redis",
			"redis_host": "127.0.0.1", "redis_port": 1}, "log-redis")
		logs, last := logsOf(id, 5, &kongReq{IP: "192.0.2.32"})
		if last.Exit || len(logs) != 1 || !strings.HasPrefix(logs[0], "err: diana: Redis could not decide rule log-redis.main.fixed_window for client 192.0.2.32, on_error open applied") {
			t.Fatalf("Redis down, fault tolerant: exit %v, logs %q; want requests let through and one error", last.Exit, logs)
		}
	})

	t.Run("invalid config", func(t *testing.T) {
		for _, closed := range []bool{false, true} {
			id := s.start(map[string]any{"algorithm": "fixed_window", "limit": 5, "window": "abc", "fail_closed": closed}, fmt.Sprint("log-invalid-", closed))
			logs, last := logsOf(id, 3, &kongReq{IP: "192.0.2.33"})
			if last.Exit != closed || closed && last.Status != 503 {
				t.Errorf("fail_closed %v: exit %v status %d", closed, last.Exit, last.Status)
			}
			if len(logs) != 1 || !strings.HasPrefix(logs[0], "err: diana: invalid config") || !strings.Contains(logs[0], "window") {
				t.Errorf("fail_closed %v: logs %q; want one error naming the field", closed, logs)
			}
		}
	})
}
