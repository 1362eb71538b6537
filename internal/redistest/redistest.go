// Package redistest starts real redis-server processes on free loopback ports for tests.
//
// A missing redis-server fails the test: it never skips, so CI cannot pass without Redis
// (make test installs it).
package redistest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The tests stop, pause and restart servers on purpose; go-redis would print every failed dial
// of its pools to stderr (a process-wide logger), burying the test output. Tests assert what
// matters; these lines would only be noise.
func init() { redis.SetLogger(quiet{}) }

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

// Server is a redis-server child process, stopped when the test ends.
type Server struct {
	Addr    string
	t       testing.TB
	dir     string
	port    int
	cluster bool
	cmd     *exec.Cmd
}

// Start starts a fresh redis-server (no persistence) on a free loopback port.
func Start(t testing.TB) *Server { return start(t, false) }

// StartCluster starts a one-node Redis Cluster that serves all 16384 slots, so that
// go-redis's ClusterClient works against it and scripts whose keys span slots fail with
// CROSSSLOT, as on a real cluster.
func StartCluster(t testing.TB) *Server {
	s := start(t, true)
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer c.Close()
	ctx := context.Background()
	if err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		t.Fatalf("assign slots: %v", err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		info, _ := c.ClusterInfo(ctx).Result()
		if strings.Contains(info, "cluster_state:ok") {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("one-node cluster not ok after 10s: %s", info)
		}
	}
}

func start(t testing.TB, cluster bool) *Server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server is needed by this test and is not on PATH (make test installs it): %v", err)
	}
	s := &Server{t: t, dir: t.TempDir(), cluster: cluster}
	s.port = freePort(t)
	s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
	s.start()
	t.Cleanup(s.Stop)
	return s
}

func (s *Server) start() {
	s.t.Helper()
	args := []string{
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir,
		"--logfile", filepath.Join(s.dir, "redis.log")}
	if s.cluster {
		args = append(args, "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(s.dir, "nodes.conf"))
	}
	s.cmd = exec.Command("redis-server", args...)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start redis-server: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", s.Addr, 100*time.Millisecond)
		if err == nil {
			r := bufio.NewReader(c)
			fmt.Fprint(c, "PING\r\n")
			c.SetReadDeadline(time.Now().Add(time.Second))
			line, _ := r.ReadString('\n')
			c.Close()
			if strings.HasPrefix(line, "+PONG") {
				return
			}
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			s.t.Fatalf("redis-server on %s did not answer PING within 10s: %s", s.Addr, log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Client returns a go-redis client for the server that honours context deadlines, closed when
// the test ends.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true})
	s.t.Cleanup(func() { c.Close() })
	return c
}

// Stop kills the server; safe to call twice.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	s.cmd.Process.Kill()
	s.cmd.Wait()
	s.cmd = nil
}

// Restart stops the server and starts a fresh one on the same port: data and scripts are gone.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	s.start()
}

// Pause stops the server process (SIGSTOP) so that it accepts connections but never answers.
func (s *Server) Pause() { s.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume continues a paused server.
func (s *Server) Resume() { s.cmd.Process.Signal(syscall.SIGCONT) }

// CommandStat is one line of INFO commandstats.
type CommandStat struct {
	Calls       int64
	UsecPerCall float64
}

// CommandStats returns INFO commandstats by command name ("evalsha", "get", ...).
func (s *Server) CommandStats(ctx context.Context) (map[string]CommandStat, error) {
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer c.Close()
	info, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	out := map[string]CommandStat{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		var st CommandStat
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "calls":
				st.Calls, _ = strconv.ParseInt(v, 10, 64)
			case "usec_per_call":
				st.UsecPerCall, _ = strconv.ParseFloat(v, 64)
			}
		}
		out[strings.TrimPrefix(name, "cmdstat_")] = st
	}
	return out, nil
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
