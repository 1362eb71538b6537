package server

import (
	"container/list"
	"context"
	"errors"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Connection limits. Each listener (the proxy, the admin listener) has nginx's timeouts and a cap
// on its open connections (Connections):
//
//   - keepalive_timeout and header_timeout are http.Server's IdleTimeout and ReadHeaderTimeout;
//   - body_timeout and send_timeout bound the time between two reads of a request's body and
//     between two writes of its response, as nginx's client_body_timeout and send_timeout do,
//     not the whole request or response: http.Server's ReadTimeout and WriteTimeout would cut a
//     large upload, a long download, a stream, and a request held by a delay rule (up to its
//     max_delay) before its first byte is written. timeouts sets the deadlines around each read
//     and write instead;
//   - at the cap, as nginx does when its worker_connections run out, the connection waiting the
//     longest for a request (idle between two, or not sent a byte yet) is closed to make room;
//     when every connection is busy with a request, Accept waits (the kernel's backlog holds the
//     new ones) until one ends or goes idle: a request in flight is never cut. The listeners have
//     caps of their own, and the default caps share the open-file limit between them (maxConns),
//     so that a flood on the proxy leaves the admin listener its room.
//
// The rate limit service's gRPC listener has the same cap (grpcconns.go), a connection being
// idle there while it has no stream open.

// connReserve is the part of the open-file limit the default caps leave to everything but the
// listeners: the Redis pool, config and log files.
const connReserve = 128

// The listeners whose default caps share the open-file limit.
type listenerKind int

const (
	proxyListener listenerKind = iota
	adminListener
	rlsListener
)

// maxConns returns a listener's cap: set if not 0, else its share of the open-file limit less
// connReserve, cut in parts: the proxy's cap is two parts (a proxy connection may hold two
// files, the client's and the upstream's: four parts of files), the admin listener's one, and
// the rate limit service's one when it listens (withRLS). Every listener's connections together
// then stay within the limit, and a flood of one leaves the others their room.
func maxConns(set int, kind listenerKind, withRLS bool) int {
	if set > 0 {
		return set
	}
	var rl syscall.Rlimit
	limit := 1024 // a common soft limit, if it cannot be read
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err == nil && rl.Cur > 0 {
		limit = int(min(rl.Cur, 1<<24)) // the Go runtime raised it to the hard limit at start
	}
	parts := 5
	if withRLS {
		parts++
	}
	share := max(limit-connReserve, 64) / parts
	if kind == proxyListener {
		share *= 2
	}
	return max(share, 16)
}

// connLimiter is a listener with a cap on its open connections; the http.Server that serves it
// tells it each connection's state (its ConnState hook: connState).
type connLimiter struct {
	net.Listener
	max       int
	reclaimed func() // told of each idle connection closed to make room

	grpc bool // its connections carry gRPC streams (grpcConn), each tells its own

	mu      sync.Mutex
	cond    *sync.Cond // signalled when a connection closes or goes idle, and on Close
	open    int        // connections accepted and not closed
	waiting list.List  // of *limitedConn waiting for a request (new or idle), longest first
	closed  bool
}

// limitedConn is a connection of a connLimiter.
type limitedConn struct {
	net.Conn
	l       *connLimiter
	waiting *list.Element // in l.waiting, nil when busy or closed; guarded by l.mu
	closed  bool          // released; guarded by l.mu
	streams int           // a gRPC connection's streams open; guarded by l.mu
	once    sync.Once
}

func newConnLimiter(l net.Listener, max int, reclaimed func()) *connLimiter {
	c := &connLimiter{Listener: l, max: max, reclaimed: reclaimed}
	c.cond = sync.NewCond(&c.mu)
	return c
}

// Accept waits for room under the cap, closing the connection waiting the longest for a request
// if there is one, then accepts.
func (l *connLimiter) Accept() (net.Conn, error) {
	l.mu.Lock()
	for l.open >= l.max && !l.closed { // one goroutine accepts: the room stays until it has
		if e := l.waiting.Front(); e != nil {
			v := e.Value.(*limitedConn)
			l.mu.Unlock()
			v.Close() // the server's read fails: it forgets the connection
			if l.reclaimed != nil {
				l.reclaimed()
			}
			l.mu.Lock()
			continue
		}
		l.cond.Wait()
	}
	if l.closed {
		l.mu.Unlock()
		return nil, net.ErrClosed
	}
	l.mu.Unlock()
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	c := &limitedConn{Conn: nc, l: l}
	l.mu.Lock()
	l.open++
	c.waiting = l.waiting.PushBack(c)
	l.mu.Unlock()
	if l.grpc {
		return grpcConn{c}, nil
	}
	return c, nil
}

func (l *connLimiter) Close() error {
	l.mu.Lock()
	l.closed = true
	l.cond.Broadcast()
	l.mu.Unlock()
	return l.Listener.Close()
}

// Open returns the number of open connections.
func (l *connLimiter) Open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open
}

func (l *connLimiter) release(c *limitedConn) {
	l.mu.Lock()
	l.open--
	c.closed = true
	if c.waiting != nil {
		l.waiting.Remove(c.waiting)
		c.waiting = nil
	}
	l.cond.Signal()
	l.mu.Unlock()
}

func (c *limitedConn) Close() error {
	c.once.Do(func() { c.l.release(c) })
	return c.Conn.Close()
}

// CloseWrite half-closes a TCP connection: net/http does so before closing a connection it
// refused (431), so that the client reads the answer before a reset.
func (c *limitedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// connState is the http.Server's ConnState hook: a connection that goes idle goes to the back of
// the waiting list (new ones are put there by Accept), one that reads a request leaves it.
func connState(nc net.Conn, st http.ConnState) {
	c, ok := nc.(*limitedConn)
	if !ok {
		return
	}
	if st == http.StateClosed {
		c.once.Do(func() { c.l.release(c) })
		return
	}
	switch st {
	case http.StateActive, http.StateHijacked:
		c.busy()
	case http.StateIdle:
		c.idle()
	}
}

// busy takes c off the waiting list: it has a request (or a stream) under way.
func (c *limitedConn) busy() {
	l := c.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.waiting != nil {
		l.waiting.Remove(c.waiting)
		c.waiting = nil
	}
}

// idle puts c at the back of the waiting list: it waits for its next request.
func (c *limitedConn) idle() {
	l := c.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.waiting == nil && !c.closed {
		c.waiting = l.waiting.PushBack(c)
		l.cond.Signal()
	}
}

// newHTTPServer returns the server of a listener with its connection settings (the defaults
// for a Config built without them).
func newHTTPServer(h http.Handler, c Connections, errorLog *log.Logger) *http.Server {
	if c == (Connections{}) {
		c = defaultConnections
	}
	srv := &http.Server{
		Handler:           timeouts(h, c.BodyTimeout, c.SendTimeout),
		ReadHeaderTimeout: c.HeaderTimeout,
		IdleTimeout:       c.KeepaliveTimeout,
		ConnState:         connState,
		ErrorLog:          errorLog,
	}
	if c.KeepaliveTimeout == 0 {
		srv.SetKeepAlivesEnabled(false)
	}
	return srv
}

// timeouts sets a request's read deadline before each read of its body (body), and its write
// deadline before each write of its response (send); a request held before its first write, or
// a response whose writes keep coming, is never cut.
func timeouts(h http.Handler, body, send time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tw := &timeoutWriter{ResponseWriter: w, rc: *http.NewResponseController(w), send: send}
		tw.rc.SetWriteDeadline(time.Time{}) // a former request's may be left
		if r.Body != nil && r.Body != http.NoBody {
			tw.body = &timeoutBody{ReadCloser: r.Body, rc: &tw.rc, d: body}
			r.Body = tw.body
		}
		h.ServeHTTP(tw, r)
		// net/http writes what is buffered, and reads what is left of the body (up to 256 KiB)
		// to keep the connection, after the handler returns: under the same bounds.
		tw.rc.SetWriteDeadline(time.Now().Add(send))
		if tw.body != nil && !tw.body.eof.Load() {
			tw.rc.SetReadDeadline(time.Now().Add(body))
		}
	})
}

// timeoutBody is a request body whose every read must make progress within d.
type timeoutBody struct {
	io.ReadCloser
	rc  *http.ResponseController
	d   time.Duration
	eof atomic.Bool // read to its end: the transport may read it while the response is written
}

func (b *timeoutBody) Read(p []byte) (int, error) {
	b.rc.SetReadDeadline(time.Now().Add(b.d))
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		// net/http watches the connection once the body is read (a client that goes away
		// cancels the request): the deadline must not cut that watch.
		b.rc.SetReadDeadline(time.Time{})
		b.eof.Store(errors.Is(err, io.EOF))
	}
	return n, err
}

// timeoutWriter is a response whose every write must complete within send. net/http may also
// read the rest of the request's body while writing the header (to keep the connection): that
// read is bounded by the body's timeout, and its deadline lifted once the write returns.
type timeoutWriter struct {
	http.ResponseWriter
	rc   http.ResponseController
	send time.Duration
	body *timeoutBody // nil for a request without a body
}

// before sets the deadlines of a write, and reports whether after must lift the read deadline.
func (w *timeoutWriter) before() bool {
	w.rc.SetWriteDeadline(time.Now().Add(w.send))
	if w.body == nil || w.body.eof.Load() {
		return false
	}
	w.rc.SetReadDeadline(time.Now().Add(w.body.d))
	return true
}

func (w *timeoutWriter) after(unread bool) {
	if unread {
		w.rc.SetReadDeadline(time.Time{})
	}
}

func (w *timeoutWriter) WriteHeader(code int) {
	unread := w.before()
	w.ResponseWriter.WriteHeader(code)
	w.after(unread)
}

func (w *timeoutWriter) Write(p []byte) (int, error) {
	unread := w.before()
	n, err := w.ResponseWriter.Write(p)
	w.after(unread)
	return n, err
}

// FlushError flushes what was written, for http.ResponseController.
func (w *timeoutWriter) FlushError() error {
	unread := w.before()
	err := http.NewResponseController(w.ResponseWriter).Flush()
	w.after(unread)
	return err
}

// Flush is FlushError for handlers that look for an http.Flusher (server-sent events).
func (w *timeoutWriter) Flush() { w.FlushError() }

func (w *timeoutWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// limitConns caps ln at max connections, counting and logging (a line a second at most) each
// connection closed to make room.
func (s *Server) limitConns(ln net.Listener, name string, max int) *connLimiter {
	reclaimed := s.met.connsReclaimed.WithLabelValues(name)
	l := newConnLimiter(ln, max, func() {
		reclaimed.Inc()
		s.limited.LogAttrs(context.Background(), slog.LevelWarn, "connection limit reached: closed the connection waiting the longest for a request to make room",
			slog.String("listener", name), slog.Int("max", max))
	})
	s.met.conns(name, max, l.Open)
	return l
}
