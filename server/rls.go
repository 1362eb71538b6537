package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"google.golang.org/grpc"

	"github.com/diana-gw/diana/rlqs"
	"github.com/diana-gw/diana/rls"
	"github.com/diana-gw/diana/shared/rules"
)

// rlsState is the rate limit service of the rls section: Envoy's RateLimitService on its own
// gRPC listener, deciding in the local store or the cluster store stack, with its descriptor
// config reloaded when the files of config_dir change.
type rlsState struct {
	svc    *rls.Service
	quota  *rlqs.Service // Envoy's rate limit quota service, on the same server (rlqs.go)
	grpc   *rls.GRPC
	ln     net.Listener
	reload chan struct{}
	sig    string // the config_dir signature last read, valid or not
	lastEr string // the last error reported, to log a lasting one once
}

// readRLS reads and checks the descriptor config files of r.
func readRLS(r *RLS) (*rls.Config, string, error) {
	files, sig, err := rls.ReadDir(r.ConfigDir)
	if err != nil {
		return nil, "", err
	}
	o := rls.ParseOptions{Cluster: r.Mode == rules.Cluster, MergeDomains: r.Merge}
	if r.OnError == rules.FailLocal {
		o.Nodes = r.Nodes
	}
	cfg, err := rls.Parse(files, o)
	if err != nil {
		return nil, sig, fmt.Errorf("rls: invalid descriptor config:\n%w", err)
	}
	return cfg, sig, nil
}

// newRLS sets up the rate limit service and opens its listener.
func (s *Server) newRLS() error {
	r := s.cfg.RLS
	cfg, sig, err := readRLS(r)
	if err != nil {
		return err
	}
	o := rls.Options{OnError: r.OnError, Headers: r.Headers, DynamicMetadata: r.Metadata,
		QuotaMode: r.QuotaMode, ShadowMode: r.Shadow, Observe: s.observeRLS, Unknown: s.unknownDomain}
	if r.Mode == rules.Cluster {
		o.Store = s.cluster
	} else {
		o.Store = rules.Each(s.mem.Decide)
	}
	st := &rlsState{svc: rls.New(cfg, o), reload: make(chan struct{}, 1), sig: sig}
	ln, err := net.Listen("tcp", r.Listen)
	if err != nil {
		return fmt.Errorf("server: rls.listen: %w", err)
	}
	c := r.Connections
	if c == (GRPCConnections{}) { // a Config built without them
		c = defaultGRPCConnections
	}
	l := s.limitConns(ln, "rls", maxConns(c.Max, rlsListener, true))
	l.grpc = true
	st.ln = l
	st.grpc = rls.NewGRPC(st.svc, grpcOptions(c, &grpcGuard{timeout: c.HeaderTimeout, silent: s.silentStream})...)
	s.newRLQS(st, cfg)
	s.rls = st
	s.log.Info("rls: descriptor config read", "dir", r.ConfigDir, "domains", cfg.Domains())
	return nil
}

// silentStream counts and logs a gRPC stream ended for sending no message.
func (s *Server) silentStream() {
	s.met.silentStreams.Inc()
	s.limited.Warn("rls: stream ended: no message within rls.connections.header_timeout",
		"header_timeout", s.cfg.RLS.Connections.HeaderTimeout)
}

// RLSAddr returns the address the rate limit service listens on, "" without one.
func (s *Server) RLSAddr() string {
	if s.rls == nil {
		return ""
	}
	return addr(s.rls.ln)
}

// serveRLS serves the rate limit service until stopRLS; a failure goes to errc.
func (s *Server) serveRLS(errc chan<- error) {
	s.log.Info("listening", "listener", "rls", "addr", s.rls.ln.Addr().String())
	go func() {
		if err := s.rls.grpc.Serve(s.rls.ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			errc <- fmt.Errorf("server: rls: %w", err)
		}
	}()
}

// stopRLS reports NOT_SERVING to health checks, then lets the calls in flight finish until ctx
// ends.
func (s *Server) stopRLS(ctx context.Context) error {
	s.rls.grpc.Draining()
	s.rls.quota.Close() // its streams last as long as Envoy: end them, Envoy opens them again elsewhere
	done := make(chan struct{})
	go func() { s.rls.grpc.GracefulStop(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.rls.grpc.Stop()
		<-done
		return fmt.Errorf("server: rls shutdown: %w", ctx.Err())
	}
}

// watchRLS checks the descriptor config files every remote.interval, and at once on Reload.
func (s *Server) watchRLS(ctx context.Context) {
	t := time.NewTicker(s.cfg.Remote.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.reloadRLS(false)
		case <-s.rls.reload:
			s.reloadRLS(true)
		}
	}
}

// reloadRLS reads the descriptor config files again if they changed (or if forced) and swaps a
// valid config in; an invalid one is logged, once, and the running one kept.
func (s *Server) reloadRLS(force bool) {
	st := s.rls
	dir := s.cfg.RLS.ConfigDir
	if sig, _, err := rls.Signature(dir); err == nil && sig == st.sig && !force {
		return
	}
	cfg, sig, err := readRLS(s.cfg.RLS)
	s.met.reload("rls", err)
	if err != nil {
		if sig != "" {
			st.sig = sig // not read again until it changes
		}
		if msg := err.Error(); msg != st.lastEr || force {
			st.lastEr = msg
			s.log.Warn("rls: descriptor config invalid or unreadable, keeping the running one", "dir", dir, "err", err)
		}
		return
	}
	st.sig, st.lastEr = sig, ""
	st.svc.SetConfig(cfg)
	st.quota.SetConfig(cfg)
	s.log.Info("rls: descriptor config applied", "dir", dir, "domains", cfg.Domains())
}

// observeRLS is the service's hook, called once per descriptor with a limit: the metrics count
// it under the rule "rls:" + its stats key, and the paths where it passes unlimited log.
func (s *Server) observeRLS(key string, o rules.Outcome, err error) {
	name := "rls:" + key
	s.met.decision(name, o)
	if err != nil {
		s.met.backendError(name)
		s.limited.LogAttrs(context.Background(), slog.LevelWarn, "rate-limit backend failed: rls decided by its on_error policy",
			slog.String("limit", name), slog.String("on_error", s.cfg.RLS.OnError.String()), slog.Any("err", err))
	}
	switch o {
	case rules.ShadowDenied:
		s.limited.LogAttrs(context.Background(), slog.LevelInfo, "rls: shadow_mode limit would deny the request", slog.String("limit", name))
	case rules.Denied:
		s.limited.LogAttrs(context.Background(), slog.LevelInfo, "rls: over the limit", slog.String("limit", name))
	}
}

// unknownDomain counts and logs a request whose domain no descriptor config declares.
func (s *Server) unknownDomain(domain string) {
	s.met.rlsUnknown.Inc()
	s.limited.LogAttrs(context.Background(), slog.LevelWarn, "rls: no descriptor config declares the domain: its descriptors pass unlimited",
		slog.String("domain", domain))
}
