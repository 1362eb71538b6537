package stack

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/diana-gw/diana/internal/redistest"
	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/redisstore"
)

// newStack is a stack on a real Redis whose logs go to the returned buffer.
func newStack(t *testing.T, h Hooks) (*Stack, *bytes.Buffer) {
	t.Helper()
	rs := redistest.Start(t)
	var buf bytes.Buffer
	h.Log = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	st, err := New(Redis{Conn: redisstore.Conn{Addrs: []string{rs.Addr}}}, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Client.Close() })
	return st, &buf
}

// The glue: each event reaches the front end's metrics hook every time, and its log at most
// once a second (the starvation and share reports) or every time (the breaker's state).
func TestGlue(t *testing.T) {
	var opens []bool
	var waits []time.Duration
	st, buf := newStack(t, Hooks{OnState: func(open bool) { opens = append(opens, open) },
		OnStarved: func(w time.Duration) { waits = append(waits, w) }})
	st.state(true)
	st.state(false)
	st.starved(time.Millisecond)
	st.starved(2 * time.Millisecond)
	st.shareError(errors.New("share failed"))
	st.shareError(errors.New("share failed again"))
	if len(opens) != 2 || !opens[0] || opens[1] || len(waits) != 2 {
		t.Errorf("hooks saw states %v, starvations %v; want [true false] and two", opens, waits)
	}
	for _, c := range []struct {
		line string
		n    int
	}{
		{"Redis circuit breaker open", 1},
		{"Redis circuit breaker closed", 1},
		{"starved of CPU", 1},
		{"share failed", 1},
		{"share failed again", 0},
	} {
		if n := strings.Count(buf.String(), c.line); n != c.n {
			t.Errorf("%d log lines with %q, want %d:\n%s", n, c.line, c.n, buf)
		}
	}
}

// Without hooks, the events are logged all the same.
func TestGlueWithoutHooks(t *testing.T) {
	st, buf := newStack(t, Hooks{})
	st.state(true)
	st.starved(time.Millisecond)
	if !strings.Contains(buf.String(), "circuit breaker open") || !strings.Contains(buf.String(), "starved of CPU") {
		t.Errorf("log without hooks:\n%s", buf)
	}
}

// Run flushes until its context ends; Shutdown gives the batched units back and logs nothing
// when they all went back.
func TestRunShutdown(t *testing.T) {
	st, buf := newStack(t, Hooks{})
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	done := make(chan struct{})
	go func() { st.Run(ctx); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	st.Shutdown(context.Background())
	if strings.Contains(buf.String(), "not given back") {
		t.Errorf("log:\n%s", buf)
	}
}

func TestConflicts(t *testing.T) {
	for _, c := range []struct {
		name    string
		r       Redis
		keep    []Conflict // reported without drop
		dropped []Conflict // reported with drop
		cluster bool       // after drop
		wait    int        // after drop
	}{
		{"standalone with WAIT", Redis{Conn: redisstore.Conn{Addrs: []string{"a:1"}}, Wait: 1}, nil, nil, false, 1},
		{"sentinel with WAIT", Redis{Conn: redisstore.Conn{Addrs: []string{"a:1", "b:1"}, MasterName: "m"}, Wait: 1}, nil, nil, false, 1},
		{"cluster by addresses with WAIT", Redis{Conn: redisstore.Conn{Addrs: []string{"a:1", "b:1"}}, Wait: 2},
			[]Conflict{WaitOnCluster}, []Conflict{WaitOnCluster}, false, 0},
		{"cluster with WAIT", Redis{Conn: redisstore.Conn{Addrs: []string{"a:1"}, Cluster: true}, Wait: 2},
			[]Conflict{WaitOnCluster}, []Conflict{WaitOnCluster}, true, 0},
		{"cluster with sentinel", Redis{Conn: redisstore.Conn{Addrs: []string{"a:1"}, Cluster: true, MasterName: "m"}},
			[]Conflict{ClusterWithSentinel}, []Conflict{ClusterWithSentinel}, false, 0},
		// Dropping Cluster first makes the addresses Sentinels, where WAIT works.
		{"cluster with sentinel and WAIT", Redis{Conn: redisstore.Conn{Addrs: []string{"a:1"}, Cluster: true, MasterName: "m"}, Wait: 1},
			[]Conflict{ClusterWithSentinel, WaitOnCluster}, []Conflict{ClusterWithSentinel}, false, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			var keep, dropped []Conflict
			r := c.r
			r.Conflicts(false, func(x Conflict) { keep = append(keep, x) })
			if r.Key() != c.r.Key() {
				t.Errorf("Conflicts without drop changed the settings")
			}
			r.Conflicts(true, func(x Conflict) { dropped = append(dropped, x) })
			if !slices.Equal(keep, c.keep) || !slices.Equal(dropped, c.dropped) || r.Cluster != c.cluster || r.Wait != c.wait {
				t.Errorf("conflicts %v, dropped %v, then cluster %v, wait %d; want %v, %v, %v, %d",
					keep, dropped, r.Cluster, r.Wait, c.keep, c.dropped, c.cluster, c.wait)
			}
		})
	}
}

// Key tells settings apart by every field, and equal settings share it.
func TestKey(t *testing.T) {
	base := func() Redis {
		return Redis{Conn: redisstore.Conn{Addrs: []string{"a:1", "b:2"}, CACert: []byte("ca")}, Prefix: "p:", Timeout: time.Second}
	}
	a, b := base(), base()
	if a.Key() != b.Key() {
		t.Errorf("equal settings, keys %q and %q", a.Key(), b.Key())
	}
	for name, change := range map[string]func(*Redis){
		"an address":   func(r *Redis) { r.Addrs[1] = "b:3" },
		"addresses":    func(r *Redis) { r.Addrs = []string{"a:1,b:2"} },
		"the CA":       func(r *Redis) { r.CACert = []byte("cb") },
		"the CA file":  func(r *Redis) { r.CAFile = "ca.pem" },
		"the timeout":  func(r *Redis) { r.Timeout = 2 * time.Second },
		"the prefix":   func(r *Redis) { r.Prefix = "q:" },
		"the password": func(r *Redis) { r.Password = "x" },
		"the breaker":  func(r *Redis) { r.Failures = 5 },
	} {
		c := base()
		change(&c)
		if c.Key() == a.Key() {
			t.Errorf("changing %s keeps the key %q", name, a.Key())
		}
	}
}

// ReadFiles reads each named file into its bytes and reports each that cannot be read, by
// which file it is.
func TestReadFiles(t *testing.T) {
	dir := t.TempDir()
	pem := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(pem, []byte("PEM"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	for _, c := range []struct {
		name     string
		r        Redis
		failed   []TLSFile
		ca, cert string
	}{
		{"none", Redis{}, nil, "", ""},
		{"CA", Redis{CAFile: pem}, nil, "PEM", ""},
		{"certificate and missing key", Redis{CertFile: pem, KeyFile: missing}, []TLSFile{KeyFile}, "", "PEM"},
		{"not regular and missing", Redis{CAFile: "/dev/zero", CertFile: missing}, []TLSFile{CAFile, CertFile}, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			var failed []TLSFile
			c.r.ReadFiles(func(f TLSFile, err error) {
				if err == nil {
					t.Errorf("file %d reported without an error", f)
				}
				failed = append(failed, f)
			})
			if !slices.Equal(failed, c.failed) || string(c.r.CACert) != c.ca || string(c.r.ClientCert) != c.cert || c.r.ClientKey != nil {
				t.Errorf("failed %v, CA %q, certificate %q, key %q; want %v, %q, %q, none", failed, c.r.CACert, c.r.ClientCert, c.r.ClientKey, c.failed, c.ca, c.cert)
			}
		})
	}
}

// Units a node gave up writing back reach the metrics hook every time and the log at most once
// a second.
func TestWriteBackLostGlue(t *testing.T) {
	var lost []int64
	st, buf := newStack(t, Hooks{OnWriteBackLost: func(units int64) { lost = append(lost, units) }})
	st.writeBackLost("k", 3, errors.New("refused"))
	st.writeBackLost("k2", 4, errors.New("refused again"))
	if !slices.Equal(lost, []int64{3, 4}) {
		t.Errorf("hook saw %v, want [3 4]", lost)
	}
	if n := strings.Count(buf.String(), "could not write back"); n != 1 {
		t.Errorf("%d log lines, want 1:\n%s", n, buf)
	}
}

// The stack writes back what a node admitted alone during an outage (on_error local) before it
// decides in Redis again, for dianad and the Kong plugin alike: 7 of 10 taken in Redis, 3 more
// alone while Redis is paused, none once Redis answers again.
func TestStackWritesBack(t *testing.T) {
	rs := redistest.Start(t)
	st, err := New(Redis{Conn: redisstore.Conn{Addrs: []string{rs.Addr}}, Timeout: 100 * time.Millisecond, Failures: 1, OpenFor: 50 * time.Millisecond},
		Hooks{Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Client.Close() })
	fw, err := algos.NewFixedWindow(10, algos.Hour)
	if err != nil {
		t.Fatal(err)
	}
	admit := func(n int) (admitted int) {
		for range n {
			op := &rules.Op{Key: "k", Alg: fw, Req: algos.Request{Cost: 1}, OnError: rules.FailLocal, Fallback: fw}
			st.Store.Decide(context.Background(), []*rules.Op{op})
			if op.Dec.Allowed {
				admitted++
			}
		}
		return admitted
	}
	if got := admit(7); got != 7 {
		t.Fatalf("Redis up: %d of 7 admitted", got)
	}
	rs.Pause()
	got := admit(10)
	rs.Resume()
	if got != 3 {
		t.Fatalf("Redis paused: %d of 10 admitted, want the 3 Redis had left", got)
	}
	for deadline := time.Now().Add(10 * time.Second); st.Store.Open(); time.Sleep(10 * time.Millisecond) {
		admit(1) // until a probe (the write-back) finds Redis back
		if time.Now().After(deadline) {
			t.Fatal("the breaker did not close")
		}
	}
	if got := admit(5); got != 0 {
		t.Fatalf("Redis back: %d of 5 admitted, want 0 (the 3 admitted alone written back)", got)
	}
}
