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
	"strings"
	"sync"
	"testing"
	"time"

	kpp "github.com/Kong/go-pdk/server/kong_plugin_protocol"
	"google.golang.org/protobuf/proto"

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
}

func startServer(t testing.TB, bin string) *pluginServer {
	t.Helper()
	prefix := t.TempDir()
	cmd := exec.Command(bin, "-kong-prefix", prefix)
	var logs bytes.Buffer
	cmd.Stderr = &logs
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
	s := &pluginServer{t: t, socket: filepath.Join(prefix, filepath.Base(bin)+".socket")}
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
func (s *pluginServer) access(id int32, r *kongReq) kongResult {
	s.t.Helper()
	s.seq++
	b, _ := proto.Marshal(&kpp.RpcCall{Sequence: s.seq, Call: &kpp.RpcCall_CmdHandleEvent{CmdHandleEvent: &kpp.CmdHandleEvent{InstanceId: id, EventName: "access"}}})
	s.conn.SetDeadline(time.Now().Add(30 * time.Second))
	if err := writeFrame(s.conn, b); err != nil {
		s.t.Fatal(err)
	}
	res, closed, err := answer(s.conn, r, true)
	if err != nil {
		s.t.Fatal(err)
	}
	if closed { // after kong.response.exit go-pdk closes the connection; Kong opens another
		s.conn.Close()
		if s.conn, err = net.Dial("unix", s.socket); err != nil {
			s.t.Fatal(err)
		}
	}
	return res
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

// BenchmarkAccessEvent measures, over the real protocol, one access event of diana (a per-IP
// limit, allowed path) against an empty go-pdk plugin, and the PDK calls each makes:
//
//	go test -run '^$' -bench AccessEvent ./kongplugin
func BenchmarkAccessEvent(b *testing.B) {
	for _, p := range []struct{ name, pkg string }{
		{"empty", "github.com/diana-gw/diana/kongplugin/testdata/empty"},
		{"diana", "github.com/diana-gw/diana/kongplugin"},
	} {
		b.Run(p.name, func(b *testing.B) {
			s := startServer(b, build(b, p.pkg, "diana"+map[string]string{"empty": "-empty"}[p.name]))
			id := s.start(map[string]any{}, "bench") // the defaults: 60 per minute per IP; each IP comes once
			calls := 0
			r := &kongReq{}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				r.IP = fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
				res := s.access(id, r)
				if res.Exit {
					b.Fatal("denied")
				}
				calls += len(res.Calls)
			}
			if p.name == "diana" && calls != 2*b.N {
				b.Fatalf("%d PDK calls in %d events, want 2 each", calls, b.N)
			}
			b.ReportMetric(float64(calls)/float64(b.N), "pdk-calls/op")
		})
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
