package server

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/diana-gw/diana/internal/logbuf"
)

// dial opens a raw connection to the host:port of base (http://host:port).
func dial(t *testing.T, base string) net.Conn {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.DialTimeout("tcp", u.Host, waitFor)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedWithin reads c until the server closes it and returns how long that took from start;
// it fails the test if c is still open after within.
func closedWithin(t *testing.T, c net.Conn, start time.Time, within time.Duration, what string) time.Duration {
	t.Helper()
	c.SetReadDeadline(start.Add(within))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s: the connection is still open after %v", what, within)
	}
	return time.Since(start)
}

// Idle keep-alive connections, connections that send nothing, and request bodies that stall are
// closed after their timeouts, on the proxy and on the admin listener alike.
func TestIdleConnectionsClosed(t *testing.T) {
	const timeouts = `{keepalive_timeout: 300ms, header_timeout: 300ms, body_timeout: 300ms}`
	ts := startFile(t, `version: 1
listen: "127.0.0.1:0"
connections: `+timeouts+`
admin:
  listen: "127.0.0.1:0"
  connections: `+timeouts+`
upstreams:
  - name: demo
    url: "demo:"
`)
	for _, l := range []struct{ name, base, path string }{{"proxy", ts.proxy, "/"}, {"admin", ts.admin, "/healthz"}} {
		t.Run(l.name+" keep-alive", func(t *testing.T) {
			c := dial(t, l.base)
			fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", l.path)
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || resp.Close {
				t.Fatalf("status %d, close %v: want 200 on a kept connection", resp.StatusCode, resp.Close)
			}
			took := closedWithin(t, c, time.Now(), 5*time.Second, "idle after a response")
			if took < 200*time.Millisecond {
				t.Errorf("closed after %v, before keepalive_timeout", took)
			}
		})
		t.Run(l.name+" silent", func(t *testing.T) {
			closedWithin(t, dial(t, l.base), time.Now(), 5*time.Second, "no request sent")
		})
		t.Run(l.name+" partial header", func(t *testing.T) {
			c := dial(t, l.base)
			fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n", l.path)
			closedWithin(t, c, time.Now(), 5*time.Second, "half a header sent")
		})
	}
	t.Run("proxy slow body", func(t *testing.T) {
		c := dial(t, ts.proxy)
		fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n0123456789")
		closedWithin(t, c, time.Now(), 5*time.Second, "10 of 100 bytes of body sent")
	})
	t.Run("admin slow body", func(t *testing.T) {
		c := dial(t, ts.admin)
		fmt.Fprintf(c, "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"path\":")
		closedWithin(t, c, time.Now(), 5*time.Second, "8 of 100 bytes of body sent")
	})
}

// send_timeout and body_timeout bound the time between two writes and two reads, not the whole
// exchange: a request held by a delay rule, a stream slower in all than the timeouts and an
// upload likewise go through; a client that stops reading a large response is cut.
func TestTimeoutsBetweenWrites(t *testing.T) {
	var uploaded sync.Map
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/stream": // 10 chunks, 100ms apart
			for i := range 10 {
				fmt.Fprintf(w, "chunk %d\n", i)
				http.NewResponseController(w).Flush()
				time.Sleep(100 * time.Millisecond)
			}
		case "/upload":
			n, err := io.Copy(io.Discard, r.Body)
			uploaded.Store(r.Header.Get("X-Id"), n)
			if err != nil {
				w.WriteHeader(http.StatusBadRequest)
			}
		case "/large":
			chunk := make([]byte, 1<<20)
			for range 256 {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		default:
			io.WriteString(w, "ok\n")
		}
	}))
	defer up.Close()
	const timeouts = `{send_timeout: 300ms, body_timeout: 300ms}`
	ts := startFile(t, header+`  connections: `+timeouts+`
connections: `+timeouts+`
upstreams:
  - name: up
    url: "`+up.URL+`"
rules:
  - name: paced
    match: {paths: ["/paced"]}
    action: delay
    max_delay: 2s
    limit: {algorithm: token_bucket, rate: 1, period: 1s, burst: 1}
`)
	t.Run("delayed", func(t *testing.T) {
		get(t, ts.proxy+"/paced", "")
		start := time.Now()
		r := get(t, ts.proxy+"/paced", "")
		if took := time.Since(start); r.status != http.StatusOK || took < 500*time.Millisecond {
			t.Fatalf("second request: %d after %v, want 200 after about 1s of delay", r.status, took)
		}
	})
	t.Run("stream", func(t *testing.T) {
		r := get(t, ts.proxy+"/stream", "")
		if r.status != http.StatusOK || strings.Count(r.body, "chunk") != 10 {
			t.Fatalf("status %d, body %q: want the 10 chunks", r.status, r.body)
		}
	})
	t.Run("slow upload", func(t *testing.T) {
		pr, pw := io.Pipe()
		go func() {
			for range 10 {
				pw.Write(make([]byte, 1000))
				time.Sleep(100 * time.Millisecond)
			}
			pw.Close()
		}()
		req, _ := http.NewRequest(http.MethodPost, ts.proxy+"/upload", pr)
		req.Header.Set("X-Id", "slow")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if n, _ := uploaded.Load("slow"); resp.StatusCode != http.StatusOK || n != int64(10000) {
			t.Fatalf("status %d, upstream read %v bytes: want 200 and 10000", resp.StatusCode, n)
		}
	})
	t.Run("stalled reader", func(t *testing.T) {
		c := dial(t, ts.proxy)
		fmt.Fprintf(c, "GET /large HTTP/1.1\r\nHost: x\r\n\r\n")
		time.Sleep(2 * time.Second) // the socket buffers fill, the proxy's write waits
		c.SetReadDeadline(time.Now().Add(waitFor))
		n, err := io.Copy(io.Discard, c)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() || n >= 256<<20 {
			t.Fatalf("read %d bytes of a 256 MiB response (%v): want the connection cut after send_timeout", n, err)
		}
	})
}

// A flood of idle connections, more than each listener's cap, leaves room for new requests on
// both, and does not cut a request in flight: at the cap, the connection waiting the longest
// for a request is closed.
func TestConnectionFlood(t *testing.T) {
	const proxyMax, adminMax, extra = 8, 4, 50
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			<-release
		}
		io.WriteString(w, "ok\n")
	}))
	defer up.Close()
	ts := startFile(t, `version: 1
listen: "127.0.0.1:0"
connections: {max: `+strconv.Itoa(proxyMax)+`}
admin:
  listen: "127.0.0.1:0"
  connections: {max: `+strconv.Itoa(adminMax)+`}
upstreams:
  - name: up
    url: "`+up.URL+`"
`)
	if v := metric(t, ts, `diana_connections_max{listener="proxy"}`); v != proxyMax {
		t.Fatalf("diana_connections_max of the proxy: %v, want %d", v, proxyMax)
	}
	// A request in flight, on a connection of its own.
	inFlight := make(chan error, 1)
	go func() {
		tr := &http.Transport{}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: waitFor}).Get(ts.proxy + "/slow")
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err == nil && resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("status %d", resp.StatusCode)
			}
		}
		inFlight <- err
	}()
	eventually(t, "the slow request reaches the upstream", func() bool {
		return metric(t, ts, `diana_connections_open{listener="proxy"}`) == 1
	})

	var flood []net.Conn
	for range proxyMax + extra {
		flood = append(flood, dial(t, ts.proxy))
	}
	for range adminMax + extra {
		flood = append(flood, dial(t, ts.admin))
	}

	fresh := func(url string) (int, error) {
		tr := &http.Transport{DisableKeepAlives: true}
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(url)
		if err != nil {
			return 0, err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	for _, u := range []string{ts.admin + "/healthz", ts.proxy + "/"} {
		if status, err := fresh(u); err != nil || status != http.StatusOK {
			t.Fatalf("GET %s during the flood: %d, %v; want 200", u, status, err)
		}
	}
	if v := metric(t, ts, `diana_connections_open{listener="proxy"}`); v > proxyMax {
		t.Errorf("the proxy holds %v connections, cap %d", v, proxyMax)
	}
	if v := metric(t, ts, `diana_connections_reclaimed_total{listener="proxy"}`); v < extra {
		t.Errorf("diana_connections_reclaimed_total of the proxy: %v, want at least %d", v, extra)
	}
	if v := metric(t, ts, `diana_connections_reclaimed_total{listener="admin"}`); v < extra {
		t.Errorf("diana_connections_reclaimed_total of the admin listener: %v, want at least %d", v, extra)
	}
	close(release)
	if err := <-inFlight; err != nil {
		t.Errorf("the request in flight during the flood: %v", err)
	}
	for _, c := range flood {
		c.Close()
	}
}

// An admin listener open without a token (admin.allow_unauthenticated) is said at start.
func TestOpenAdminWarned(t *testing.T) {
	for _, c := range []struct {
		admin Admin
		warn  bool
	}{
		{Admin{Listen: "0.0.0.0:0", AllowUnauthenticated: true}, true},
		{Admin{Listen: "0.0.0.0:0", Token: "t"}, false},
		{Admin{Listen: "127.0.0.1:0"}, false},
	} {
		var logs logbuf.Buffer
		// New listens, but nothing is served: the listener is closed at once.
		s, err := New(&Config{Admin: c.admin}, Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		s.close()
		if warned := strings.Contains(logs.String(), "admin listener open to every client"); warned != c.warn {
			t.Errorf("admin %+v: warned %v, want %v; log:\n%s", c.admin, warned, c.warn, logs.String())
		}
	}
}

// The local store's bound is local_store.max_keys, metered with its size and evictions.
func TestLocalStoreMetrics(t *testing.T) {
	ts := startFile(t, header+`trusted_proxies: ["127.0.0.1/32"]
local_store: {max_keys: 64}
upstreams:
  - name: demo
    url: "demo:"
rules:
  - name: per-ip
    by: [ip]
    limit: {algorithm: fixed_window, limit: 5, window: 1h}
`)
	for i := range 200 {
		if r := get(t, ts.proxy+"/", "198.51.100."+strconv.Itoa(i)); r.status != http.StatusOK {
			t.Fatalf("client %d: status %d", i, r.status)
		}
	}
	if v := metric(t, ts, "diana_local_store_max_entries"); v != 64 {
		t.Errorf("diana_local_store_max_entries %v, want 64", v)
	}
	if v := metric(t, ts, "diana_local_store_entries"); v < 32 || v > 64 {
		t.Errorf("diana_local_store_entries %v, want close to the bound 64", v)
	}
	if v := metric(t, ts, "diana_local_store_evictions_total"); v < 200-64 {
		t.Errorf("diana_local_store_evictions_total %v, want at least %d", v, 200-64)
	}
}

// The default caps share the open-file limit between the listeners, the rate limit service's
// included when it listens, leaving room for the rest.
func TestDefaultCaps(t *testing.T) {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	budget := int(rl.Cur) - connReserve
	proxy, admin := maxConns(0, proxyListener, false), maxConns(0, adminListener, false)
	if 2*proxy+admin > budget || admin < 16 || proxy != 2*admin {
		t.Errorf("open-file limit %d: caps proxy %d, admin %d; want 2 × proxy + admin within the limit less %d, proxy twice admin",
			rl.Cur, proxy, admin, connReserve)
	}
	proxy, admin, rlsCap := maxConns(0, proxyListener, true), maxConns(0, adminListener, true), maxConns(0, rlsListener, true)
	if 2*proxy+admin+rlsCap > budget || rlsCap < 16 || rlsCap != admin || proxy != 2*admin {
		t.Errorf("open-file limit %d with rls: caps proxy %d, admin %d, rls %d; want 2 × proxy + admin + rls within the limit less %d",
			rl.Cur, proxy, admin, rlsCap, connReserve)
	}
	for _, k := range []listenerKind{proxyListener, adminListener, rlsListener} {
		if maxConns(7, k, true) != 7 {
			t.Errorf("listener %d: a cap set in the config is not the one used", k)
		}
	}
}

// At the cap, connLimiter closes the connection waiting the longest for a request, never a busy
// one: with every connection busy, Accept waits until one goes idle. A connection closed while
// it goes idle is not waited on again.
func TestConnLimiter(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	reclaimed := 0
	l := newConnLimiter(ln, 2, func() { reclaimed++ })
	defer l.Close()
	clients := map[string]net.Conn{}
	accept := func(name string) <-chan net.Conn {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		clients[name] = c
		ch := make(chan net.Conn, 1)
		go func() {
			sc, err := l.Accept()
			if err != nil {
				t.Error(err)
			}
			ch <- sc
		}()
		return ch
	}
	open := func(name string) bool { // whether the server side of name is open
		c := clients[name]
		c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		_, err := c.Read(make([]byte, 1))
		var ne net.Error
		return errors.As(err, &ne) && ne.Timeout()
	}
	a := <-accept("a")
	b := <-accept("b")
	connState(a, http.StateActive)
	time.Sleep(10 * time.Millisecond)
	c := <-accept("c") // b waits longest for a request: closed
	if open("b") || !open("a") || reclaimed != 1 {
		t.Fatalf("after c: b open %v, a open %v, %d reclaimed; want b closed, a open, 1", open("b"), open("a"), reclaimed)
	}
	connState(b, http.StateIdle) // b's server side, closed, going idle: not waited on
	connState(b, http.StateClosed)
	connState(c, http.StateActive)
	d := accept("d")
	select {
	case <-d:
		t.Fatal("accepted a third connection while two were busy")
	case <-time.After(200 * time.Millisecond):
	}
	connState(a, http.StateIdle) // a's request ended: a waits, and is closed for d
	<-d
	if open("a") || !open("c") || reclaimed != 2 || l.Open() != 2 {
		t.Errorf("after d: a open %v, c open %v, %d reclaimed, %d open; want a closed, c open, 2, 2", open("a"), open("c"), reclaimed, l.Open())
	}
}
