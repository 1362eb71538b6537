package server

import (
	"context"
	"errors"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// GRPCConnections bound the connections of the rate limit service's gRPC listener (rls.listen),
// as Connections bound the HTTP listeners'. A gRPC connection multiplexes streams (HTTP/2), so
// besides a cap on connections and their idle time it bounds each connection's streams, the
// bytes of a stream's header, and the time a stream may stay silent.
type GRPCConnections struct {
	Max int // open connections at most; 0: the listener's share of the open-file limit at start
	// KeepaliveTimeout: a connection without a stream open is closed (GOAWAY) after it.
	KeepaliveTimeout time.Duration
	// HeaderTimeout bounds the HTTP/2 handshake of a new connection, and the time from a
	// stream's header to its first message: a stream that sends nothing is ended.
	HeaderTimeout  time.Duration
	MaxStreams     int // concurrent streams per connection (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS)
	MaxHeaderBytes int // a stream's header (metadata) bytes (SETTINGS_MAX_HEADER_LIST_SIZE)
}

// defaultGRPCConnections: nginx's keepalive_timeout, as the HTTP listeners'; at most 100
// streams per connection, the least RFC 9113 recommends (nginx allows 128), of 64 KiB of header
// each (Envoy's own bound on a request's headers is 60 KiB); a stream's first message within
// 10s (Envoy sends it with the header, and its rate limit calls time out long before). What a
// silent stream and an idle connection hold: docs/configuration.md, connections of rls.
var defaultGRPCConnections = GRPCConnections{
	KeepaliveTimeout: 75 * time.Second,
	HeaderTimeout:    10 * time.Second,
	MaxStreams:       100,
	MaxHeaderBytes:   64 << 10,
}

// pingInterval is what the listener tolerates of a client's HTTP/2 keepalive pings: one per
// pingInterval at most, with or without a stream open; a client pinging more often is sent
// GOAWAY (ENHANCE_YOUR_CALM) and its connection closed. gRPC's own clients keep 10s as their
// shortest keepalive time.
const pingInterval = 10 * time.Second

// pingTimeout: a connection with streams open that has been silent for its keepalive_timeout is
// pinged, and closed when the ping is not answered within pingTimeout (a peer gone without a
// FIN).
const pingTimeout = 20 * time.Second

// errSilent ends a stream that sent no message within header_timeout.
var errSilent = status.Error(codes.DeadlineExceeded, "no message within rls.connections.header_timeout")

// grpcConn is a connection of the gRPC listener: its RemoteAddr carries the connection, which
// gRPC hands each stream (peer.FromContext), so that a stream tells its connection when it
// starts and ends.
type grpcConn struct{ *limitedConn }

type connAddr struct {
	net.Addr
	c *limitedConn
}

func (c grpcConn) RemoteAddr() net.Addr { return connAddr{c.Conn.RemoteAddr(), c.limitedConn} }

// streamStarted marks c busy; the stream's end (streamEnded) makes it idle again when it was
// the last one.
func (c *limitedConn) streamStarted() {
	c.l.mu.Lock()
	c.streams++
	c.l.mu.Unlock()
	c.busy()
}

func (c *limitedConn) streamEnded() {
	c.l.mu.Lock()
	c.streams--
	last := c.streams == 0
	c.l.mu.Unlock()
	if last {
		c.idle()
	}
}

// firstMessage is the timer of a stream waiting for its first message, in the stream's context.
type firstMessage struct{}

// grpcGuard watches the streams of the gRPC listener: it tells each one's connection when it
// starts and ends, and ends a stream whose first message does not come within timeout.
type grpcGuard struct {
	timeout time.Duration
	silent  func() // told of each stream ended for sending nothing
}

// tap runs as each stream starts, before its handler (grpc.InTapHandle): the context it returns
// is the stream's own, which gRPC cancels when the stream ends; cancelling it ends the stream.
func (g *grpcGuard) tap(ctx context.Context, _ *tap.Info) (context.Context, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	t := time.AfterFunc(g.timeout, func() {
		g.silent()
		cancel(errSilent)
	})
	var c *limitedConn
	if p, ok := peer.FromContext(ctx); ok {
		if a, ok := p.Addr.(connAddr); ok {
			c = a.c
			c.streamStarted()
		}
	}
	context.AfterFunc(ctx, func() {
		t.Stop()
		if c != nil {
			c.streamEnded()
		}
	})
	return context.WithValue(ctx, firstMessage{}, t), nil
}

// heard stops the timer of the stream of ctx: its first message came.
func heard(ctx context.Context) {
	if t, ok := ctx.Value(firstMessage{}).(*time.Timer); ok {
		t.Stop()
	}
}

// unary runs once a unary call's message has come.
func (g *grpcGuard) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	heard(ctx)
	return h(ctx, req)
}

// stream watches a streaming call for its first message.
func (g *grpcGuard) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	return h(srv, &heardStream{ServerStream: ss})
}

type heardStream struct {
	grpc.ServerStream
	heard bool
}

func (s *heardStream) RecvMsg(m any) error {
	err := s.ServerStream.RecvMsg(m)
	if err == nil && !s.heard {
		s.heard = true
		heard(s.Context())
	}
	if err != nil && errors.Is(context.Cause(s.Context()), errSilent) {
		return errSilent
	}
	return err
}

// grpcOptions are the gRPC server options that bound its connections as c says.
func grpcOptions(c GRPCConnections, g *grpcGuard) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxConcurrentStreams(uint32(c.MaxStreams)),
		grpc.MaxHeaderListSize(uint32(c.MaxHeaderBytes)),
		grpc.ConnectionTimeout(c.HeaderTimeout),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: c.KeepaliveTimeout,
			Time: c.KeepaliveTimeout, Timeout: pingTimeout}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: pingInterval, PermitWithoutStream: true}),
		grpc.InTapHandle(g.tap),
		grpc.ChainUnaryInterceptor(g.unary),
		grpc.ChainStreamInterceptor(g.stream),
	}
}
