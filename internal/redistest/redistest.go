// Package redistest starts real Redis processes on free loopback ports for tests: a standalone
// redis-server (Start, StartWith for TLS and ACL users), a one-node cluster (StartCluster), a
// master and replica watched by three Sentinels (StartSentinel) and a Redis Cluster of three
// masters with one replica each (StartRedisCluster). Every process is killed when the test ends.
//
// A missing program (redis-server, redis-sentinel, redis-cli) fails the test: it never skips, so
// CI cannot pass without Redis (make test installs it).
package redistest

import (
	"bufio"
	"context"
	"crypto/tls"
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

// startTimeout bounds the wait for a process to answer, and each wait of a topology's set-up.
const startTimeout = 20 * time.Second

// Server is a Redis process (redis-server, or redis-sentinel for a Sentinel), stopped when the
// test ends.
type Server struct {
	Addr string
	// CA signs the certificate of a TLS server (StartWith with Options.TLS); nil otherwise.
	CA *CA
	// CAFile is the path of CA.PEM, for clients configured with a file; "" without TLS.
	CAFile string
	// ClientCert and ClientKey are a client certificate the CA signed and its key (PEM), and
	// ClientCertFile and ClientKeyFile their paths: with Options.ClientAuth the server admits
	// only clients that present such a certificate. Set with TLS.
	ClientCert, ClientKey         []byte
	ClientCertFile, ClientKeyFile string

	t    testing.TB
	dir  string
	port int
	bin  string   // the program: redis-server or redis-sentinel
	args []string // arguments after the common ones
	conf string   // a config file passed first (Sentinels rewrite theirs), or ""
	tls  *tls.Config
	user string // the helpers' login on a server with ACL users
	pass string
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// Pid is the server's process id, for benchmarks that read its CPU time.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Options change what StartWith starts.
type Options struct {
	// TLS makes the server speak TLS only, with a certificate for 127.0.0.1, ::1 and localhost
	// signed by a CA made for it (Server.CA). Clients need not present a certificate, unless
	// ClientAuth is set too: then they must present one the CA signed (Server.ClientCert).
	TLS        bool
	ClientAuth bool
	// Users are ACL users, each as the config file's user directive takes it after "user": a
	// name then rules, e.g. "diana on >secret ~diana:* +@all". With any user, the default user
	// is off, and the helpers (Client, CommandStats, the start-up check) log in as a user of
	// their own.
	Users []string
}

// Start starts a fresh redis-server (no persistence) on a free loopback port.
func Start(t testing.TB) *Server { return StartWith(t, Options{}) }

// StartWith starts a fresh redis-server (no persistence) on a free loopback port, with TLS and
// ACL users as o says.
func StartWith(t testing.TB, o Options) *Server {
	t.Helper()
	s := newServer(t, "redis-server")
	if o.TLS {
		s.CA = NewCA(t)
		cert, key := s.CA.Issue(t, "127.0.0.1", "::1", "localhost")
		s.ClientCert, s.ClientKey = s.CA.Issue(t, "diana-client")
		files := map[string][]byte{"ca.crt": s.CA.PEM, "server.crt": cert, "server.key": key, "client.crt": s.ClientCert, "client.key": s.ClientKey}
		for name, b := range files {
			if err := os.WriteFile(filepath.Join(s.dir, name), b, 0o600); err != nil {
				t.Fatalf("write %s: %v", name, err)
			}
		}
		s.args = append(s.args, "--port", "0", "--tls-port", strconv.Itoa(s.port),
			"--tls-cert-file", filepath.Join(s.dir, "server.crt"),
			"--tls-key-file", filepath.Join(s.dir, "server.key"),
			"--tls-ca-cert-file", filepath.Join(s.dir, "ca.crt"),
			"--tls-auth-clients", map[bool]string{false: "no", true: "yes"}[o.ClientAuth])
		s.CAFile = filepath.Join(s.dir, "ca.crt")
		s.ClientCertFile, s.ClientKeyFile = filepath.Join(s.dir, "client.crt"), filepath.Join(s.dir, "client.key")
		pair, err := tls.X509KeyPair(s.ClientCert, s.ClientKey)
		if err != nil {
			t.Fatalf("client certificate: %v", err)
		}
		s.tls = &tls.Config{RootCAs: s.CA.Pool(), MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}}
	}
	if len(o.Users) > 0 {
		s.user, s.pass = "redistest-admin", randomHex(t)
		// One argument per word: redis-server joins them into the config line, quoting any
		// argument that holds a space.
		users := append([]string{"default off", s.user + " on >" + s.pass + " ~* &* +@all"}, o.Users...)
		for _, u := range users {
			s.args = append(s.args, "--user")
			s.args = append(s.args, strings.Fields(u)...)
		}
	}
	s.run()
	return s
}

// StartCluster starts a one-node Redis Cluster that serves all 16384 slots, so that
// go-redis's ClusterClient works against it and scripts whose keys span slots fail with
// CROSSSLOT, as on a real cluster.
func StartCluster(t testing.TB) *Server {
	t.Helper()
	s := newServer(t, "redis-server")
	s.args = clusterArgs(t, s.dir)
	s.run()
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer c.Close()
	ctx := context.Background()
	if err := c.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err(); err != nil {
		t.Fatalf("assign slots: %v", err)
	}
	if err := waitFor(ctx, func() error { return clusterOK(ctx, c) }); err != nil {
		t.Fatalf("one-node cluster on %s: %v", s.Addr, err)
	}
	return s
}

// clusterArgs are the arguments of a cluster node. The cluster bus gets a free port of its own:
// by default it is the port + 10000, which does not exist above port 55535.
func clusterArgs(t testing.TB, dir string) []string {
	return []string{"--cluster-enabled", "yes",
		"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
		"--cluster-port", strconv.Itoa(FreePort(t)),
		"--cluster-node-timeout", strconv.Itoa(int(ClusterNodeTimeout / time.Millisecond))}
}

// newServer prepares a process of program bin on a free port, killed at the end of the test;
// run starts it.
func newServer(t testing.TB, bin string) *Server {
	t.Helper()
	if _, err := exec.LookPath(bin); err != nil {
		t.Fatalf("%s is needed by this test and is not on PATH (make test installs it): %v", bin, err)
	}
	s := &Server{t: t, dir: t.TempDir(), bin: bin}
	s.port = FreePort(t)
	s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
	t.Cleanup(s.Stop)
	return s
}

// startAttempts bounds the starts of a server whose port another process took between
// FreePort and the server's bind.
const startAttempts = 5

// run starts the server and waits until it answers. A port is free when FreePort returns it,
// but another process (a server of another test package) may bind it before this one does:
// then the server starts again on fresh ports.
func (s *Server) run() {
	s.t.Helper()
	for attempt := 1; ; attempt++ {
		log, err := s.start()
		if err == nil {
			return
		}
		if attempt < startAttempts && strings.Contains(log, "Address already in use") {
			s.repick()
			continue
		}
		s.t.Fatalf("%s on %s did not answer PING within %v: %v\n%s", s.bin, s.Addr, startTimeout, err, log)
	}
}

// repick gives the server fresh ports: its own, and its cluster bus's.
func (s *Server) repick() {
	s.port = FreePort(s.t)
	s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
	for i := 0; i+1 < len(s.args); i++ {
		switch s.args[i] {
		case "--tls-port":
			s.args[i+1] = strconv.Itoa(s.port)
		case "--cluster-port":
			s.args[i+1] = strconv.Itoa(FreePort(s.t))
		}
	}
}

// start starts the process once; on a failure it returns why, with the server's log (which it
// removes, for the next attempt).
func (s *Server) start() (string, error) {
	s.t.Helper()
	var args []string
	if s.conf != "" {
		args = append(args, s.conf)
	}
	args = append(args, "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--dir", s.dir, "--logfile", filepath.Join(s.dir, "redis.log"))
	if s.bin == "redis-server" {
		// A replica's first sync starts at once instead of after 5 s (diskless sync's delay).
		args = append(args, "--save", "", "--appendonly", "no", "--repl-diskless-sync-delay", "0")
	}
	args = append(args, s.args...) // last: a later --port overrides (TLS sets --port 0)
	s.cmd = exec.Command(s.bin, args...)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start %s: %v", s.bin, err)
	}
	cmd, done := s.cmd, make(chan struct{})
	s.done = done
	go func() { cmd.Wait(); close(done) }()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	err := waitFor(ctx, func() error {
		select {
		case <-done:
			return stop{fmt.Errorf("exited: %v", cmd.ProcessState)}
		default:
			return s.ping()
		}
	})
	if err != nil {
		cmd.Process.Kill()
		<-done
		s.cmd = nil
		file := filepath.Join(s.dir, "redis.log")
		log, _ := os.ReadFile(file)
		os.Remove(file)
		return string(log), err
	}
	return "", nil
}

// ping sends PING (after AUTH on a server with ACL users) on a fresh connection, by hand: a
// go-redis client would log and retry.
func (s *Server) ping() error {
	c, err := net.DialTimeout("tcp", s.Addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if s.tls != nil {
		conf := s.tls.Clone()
		conf.ServerName = "127.0.0.1"
		c = tls.Client(c, conf)
	}
	if s.user != "" {
		fmt.Fprintf(c, "AUTH %s %s\r\n", s.user, s.pass)
	}
	fmt.Fprint(c, "PING\r\n")
	r := bufio.NewReader(c)
	if s.user != "" {
		if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "+OK") {
			return fmt.Errorf("AUTH: %q %v", line, err)
		}
	}
	line, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("PING: %q %v", line, err)
	}
	return nil
}

// Options returns the options of a go-redis client for the server: TLS with the server's CA,
// the helpers' login on a server with ACL users, and context deadlines honoured.
func (s *Server) Options() *redis.Options {
	o := &redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true, Username: s.user, Password: s.pass}
	if s.tls != nil {
		o.TLSConfig = s.tls.Clone()
	}
	return o
}

// Client returns a go-redis client for the server (see Options), closed when the test ends.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(s.Options())
	s.t.Cleanup(func() { c.Close() })
	return c
}

// Stop kills the process; safe to call twice.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// Running reports whether the process was started and not stopped.
func (s *Server) Running() bool { return s.cmd != nil }

// Restart stops the server and starts a fresh one on the same port: data and scripts are gone.
func (s *Server) Restart() {
	s.t.Helper()
	s.Stop()
	s.run()
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
	c := redis.NewClient(s.Options())
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

// CPU returns the CPU time the server has used, user and system (INFO cpu).
func (s *Server) CPU(ctx context.Context) (time.Duration, error) {
	c := redis.NewClient(s.Options())
	defer c.Close()
	info, err := c.Info(ctx, "cpu").Result()
	if err != nil {
		return 0, err
	}
	var total float64
	for _, field := range []string{"used_cpu_sys", "used_cpu_user"} {
		v, err := strconv.ParseFloat(infoField(info, field), 64)
		if err != nil {
			return 0, fmt.Errorf("INFO cpu %s: %w", field, err)
		}
		total += v
	}
	return time.Duration(total * float64(time.Second)), nil
}

// stop is an error of a check that waiting cannot cure.
type stop struct{ error }

// waitFor calls check every 20 ms until it returns nil, and returns its last error when ctx is
// done (or a deadline of startTimeout, if ctx has none) or the error is a stop.
func waitFor(ctx context.Context, check func() error) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, startTimeout)
		defer cancel()
	}
	for {
		err := check()
		if err == nil {
			return nil
		}
		if st, ok := err.(stop); ok {
			return st.error
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last check: %v)", ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// infoField returns field's value in an INFO or CLUSTER INFO reply, or "".
func infoField(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

func clusterOK(ctx context.Context, c *redis.Client) error {
	info, err := c.ClusterInfo(ctx).Result()
	if err != nil {
		return err
	}
	if st := infoField(info, "cluster_state"); st != "ok" {
		return fmt.Errorf("%s: cluster_state:%s", c.Options().Addr, st)
	}
	return nil
}

// FreePort returns a loopback port that was free a moment ago, for a server a test starts.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
