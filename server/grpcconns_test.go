package server

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// The rate limit service's gRPC listener, bounded as the HTTP listeners are: a raw HTTP/2
// client (h2Conn) opens connections and streams as a hostile one would.

// h2Conn is a raw HTTP/2 connection to a gRPC server, which records how the server ends its
// streams and the connection.
type h2Conn struct {
	c  net.Conn
	fr *http2.Framer
	mu sync.Mutex // guards the writes and what follows
	id uint32     // the last stream id opened

	refused, ended int // streams reset REFUSED_STREAM; streams ended otherwise (reset or trailers)
	resets         map[uint32]http2.ErrCode
	goaway         bool          // the server sent GOAWAY
	closed         chan struct{} // the connection was closed
}

// dialH2 opens an HTTP/2 connection: the preface and an empty SETTINGS frame.
func dialH2(t testing.TB, addr string) *h2Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, waitFor)
	if err != nil {
		t.Fatal(err)
	}
	h := &h2Conn{c: c, fr: http2.NewFramer(c, bufio.NewReader(c)), resets: map[uint32]http2.ErrCode{}, closed: make(chan struct{})}
	h.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	// A write fails when the server has closed the connection already (at its cap): read then
	// sees it closed.
	if _, err := io.WriteString(c, http2.ClientPreface); err == nil {
		h.fr.WriteSettings()
	}
	go h.read()
	return h
}

func (h *h2Conn) read() {
	defer close(h.closed)
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			return
		}
		h.mu.Lock()
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				h.fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				h.fr.WritePing(true, f.Data)
			}
		case *http2.RSTStreamFrame:
			if f.ErrCode == http2.ErrCodeRefusedStream {
				h.refused++
			} else if _, ok := h.resets[f.StreamID]; !ok {
				h.ended++
			}
			h.resets[f.StreamID] = f.ErrCode
		case *http2.MetaHeadersFrame:
			if f.StreamEnded() { // the trailers: the call ended
				if _, ok := h.resets[f.StreamID]; !ok {
					h.ended++
					h.resets[f.StreamID] = http2.ErrCodeNo
				}
			}
		case *http2.GoAwayFrame:
			h.goaway = true
		}
		h.mu.Unlock()
	}
}

// open starts a ShouldRateLimit call that never sends its message, with pad bytes of
// metadata. It reports false when the connection is gone.
func (h *h2Conn) open(pad int) bool {
	var b bytes.Buffer
	e := hpack.NewEncoder(&b)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", "rls"},
		{":path", "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"},
		{"content-type", "application/grpc"}, {"te", "trailers"}} {
		e.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	for ; pad > 0; pad -= 4 << 10 { // fields of 4 KiB: under any bound on one field's length
		e.WriteField(hpack.HeaderField{Name: "x-pad", Value: strings.Repeat("p", min(pad, 4<<10))})
	}
	block := b.Bytes()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.id += 2
	if h.id == 2 {
		h.id = 1
	}
	const frame = 16 << 10 // the default SETTINGS_MAX_FRAME_SIZE
	first := block[:min(len(block), frame)]
	block = block[len(first):]
	if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: h.id, BlockFragment: first, EndHeaders: len(block) == 0}); err != nil {
		return false
	}
	for len(block) > 0 {
		n := min(len(block), frame)
		if err := h.fr.WriteContinuation(h.id, n == len(block), block[:n]); err != nil {
			return false
		}
		block = block[n:]
	}
	return true
}

// counts returns the streams refused and the streams ended so far.
func (h *h2Conn) counts() (refused, ended int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.refused, h.ended
}

func (h *h2Conn) isClosed() bool {
	select {
	case <-h.closed:
		return true
	default:
		return false
	}
}

func rlsBounded(extra string) string {
	return rlsConfig(examplesDir, "  connections: {"+extra+"}\n")
}

// One connection opening many silent streams holds at most max_streams of them at once (the
// rest are refused), and each of those is ended once header_timeout passes without its message.
func TestGRPCSilentStreams(t *testing.T) {
	const maxStreams, opened, timeout = 16, 2000, 500 * time.Millisecond
	ts := startFile(t, rlsBounded("max_streams: 16, header_timeout: 500ms"))
	h := dialH2(t, ts.RLSAddr())
	defer h.c.Close()
	start := time.Now()
	for range opened {
		if !h.open(0) {
			t.Fatal("the connection was closed while streams were opened")
		}
	}
	// Each stream accepted lasts header_timeout at least: while the streams were opened, at
	// most maxStreams per header_timeout begun could be accepted.
	windows := int(time.Since(start)/timeout) + 1
	eventually(t, "every stream refused or ended", func() bool {
		refused, ended := h.counts()
		return refused+ended == opened
	})
	refused, ended := h.counts()
	if ended > maxStreams*windows {
		t.Errorf("%d streams accepted of %d opened on one connection in %d × header_timeout; want at most %d (max_streams %d at once)",
			ended, opened, windows, maxStreams*windows, maxStreams)
	}
	if v := metric(t, ts, "diana_rls_silent_streams_total"); int(v) != ended {
		t.Errorf("diana_rls_silent_streams_total %v, want the %d streams ended for their silence (%d refused)", v, ended, refused)
	}
	// The connection still serves: a stream that sends its message is answered.
	c, _ := rlsClient(t, ts)
	if code, _ := ask(t, c, "messaging", 1, rlsDesc("to_number", "2061111111")); code != "OK" {
		t.Errorf("a call beside the silent streams: %s", code)
	}
}

// A stream whose header passes max_header_bytes ends its connection (the HTTP/2 framer's
// answer to header frames past the bound, CONTINUATION floods included), and its header is not
// kept: 10 streams of 8 MiB of metadata leave the heap as it was.
func TestGRPCHeaderBytes(t *testing.T) {
	const streams, pad = 10, 8 << 20
	ts := startFile(t, rlsBounded("max_header_bytes: 65536, header_timeout: 1m"))
	before := heapInUse()
	for i := range streams {
		h := dialH2(t, ts.RLSAddr())
		h.open(pad) // fails once the server has closed the connection
		select {
		case <-h.closed:
		case <-time.After(waitFor):
			t.Fatalf("stream %d with %d MiB of metadata: its connection still open after %v", i, pad>>20, waitFor)
		}
		h.c.Close()
	}
	if grown := heapInUse() - before; grown > pad*streams/8 {
		t.Errorf("the heap grew by %d MiB with %d streams of %d MiB of metadata sent; want it not to keep them", grown>>20, streams, pad>>20)
	}
	// A header within the bound is read.
	c, _ := rlsClient(t, ts)
	if code, _ := ask(t, c, "messaging", 1, rlsDesc("to_number", "2061111111")); code != "OK" {
		t.Errorf("a call after the large headers: %s", code)
	}
}

// heapInUse returns the bytes of the heap in use, after a collection.
func heapInUse() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapInuse)
}

// A connection without a stream open is closed once keepalive_timeout passes.
func TestGRPCIdleConnectionsClosed(t *testing.T) {
	ts := startFile(t, rlsBounded("keepalive_timeout: 1s"))
	var conns []*h2Conn
	for range 20 {
		h := dialH2(t, ts.RLSAddr())
		defer h.c.Close()
		conns = append(conns, h)
	}
	for i, h := range conns {
		select {
		case <-h.closed:
		case <-time.After(waitFor):
			t.Fatalf("idle connection %d still open after %v (keepalive_timeout 1s)", i, waitFor)
		}
		if !h.goaway {
			t.Errorf("idle connection %d closed without a GOAWAY", i)
		}
	}
}

// A flood of idle connections past the cap leaves room for new calls: the connection idle the
// longest is closed to make room.
func TestGRPCConnectionFlood(t *testing.T) {
	const maxConnections, extra = 8, 50
	ts := startFile(t, rlsBounded("max: 8"))
	for range maxConnections + extra {
		h := dialH2(t, ts.RLSAddr())
		defer h.c.Close()
	}
	if err := rlsHealth(ts.RLSAddr()); err != nil {
		t.Fatalf("health check during the flood: %v", err)
	}
	if v := metric(t, ts, `diana_connections_open{listener="rls"}`); v > maxConnections {
		t.Errorf("the rls listener holds %v connections, cap %d", v, maxConnections)
	}
	if v := metric(t, ts, `diana_connections_reclaimed_total{listener="rls"}`); v < extra {
		t.Errorf(`diana_connections_reclaimed_total{listener="rls"} %v, want at least %d`, v, extra)
	}
}

// rlsHealth asks the gRPC health service at addr, on a connection of its own.
func rlsHealth(addr string) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

// budgetChild, set in the environment, makes TestDescriptorBudget the dianad it floods: with an
// open-file limit of budgetFiles, serving the config the variable names.
const (
	budgetChild = "DIANA_TEST_BUDGET_CONFIG"
	budgetFiles = 256
)

// Under a low open-file limit, idle connections to the gRPC listener, more than the limit, do not
// take the descriptors the proxy and the admin listener need: the listeners' default caps share
// one budget.
func TestDescriptorBudget(t *testing.T) {
	if file := os.Getenv(budgetChild); file != "" {
		serveBudgetChild(t, file)
		return
	}
	up := okUpstream(t)
	file := t.TempDir() + "/diana.yaml"
	writeFile(t, file, rlsConfig(examplesDir, "")+"upstreams:\n  - {name: up, url: \""+up+"\"}\n")
	cmd := exec.Command(os.Args[0], "-test.run=^TestDescriptorBudget$", "-test.v")
	cmd.Env = append(os.Environ(), budgetChild+"="+file)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stop, err := cmd.StdinPipe() // the child serves until its standard input closes
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stop.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	var proxy, admin, rlsAddr string
	sc := bufio.NewScanner(out)
	for sc.Scan() && rlsAddr == "" {
		fmt.Sscanf(sc.Text(), "listening %s %s %s", &proxy, &admin, &rlsAddr)
	}
	if rlsAddr == "" {
		t.Fatal("the child dianad did not start")
	}
	go io.Copy(io.Discard, out)

	for range budgetFiles + 100 {
		h := dialH2(t, rlsAddr)
		defer h.c.Close()
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	for _, u := range []string{"http://" + admin + "/healthz", "http://" + proxy + "/"} {
		resp, err := client.Get(u)
		if err != nil {
			t.Fatalf("GET %s with the gRPC listener flooded: %v", u, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s with the gRPC listener flooded: %d", u, resp.StatusCode)
		}
	}
	if err := rlsHealth(rlsAddr); err != nil {
		t.Errorf("rls health check with the gRPC listener flooded: %v", err)
	}
}

// serveBudgetChild runs dianad on file under an open-file limit of budgetFiles, prints its
// addresses, and serves until its standard input closes.
func serveBudgetChild(t *testing.T, file string) {
	lim := syscall.Rlimit{Cur: budgetFiles, Max: budgetFiles}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	ts := startFile(t, readFileString(t, file))
	fmt.Printf("listening %s %s %s\n", strings.TrimPrefix(ts.proxy, "http://"), strings.TrimPrefix(ts.admin, "http://"), ts.RLSAddr())
	io.Copy(io.Discard, os.Stdin) // until the parent closes it
}

func readFileString(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// okUpstream starts an upstream answering 200.
func okUpstream(t *testing.T) string {
	t.Helper()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok\n") })}
	return serveOn(t, srv)
}

// serveOn serves srv on a loopback port until the test ends, and returns its URL.
func serveOn(t *testing.T, srv *http.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}
