package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/diana-gw/diana/config"
	"github.com/diana-gw/diana/httplimit"
	"github.com/diana-gw/diana/internal/lograte"
	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/shared/usage"
	"github.com/diana-gw/diana/store/failover"
	"github.com/diana-gw/diana/store/memstore"
	"github.com/diana-gw/diana/store/redisstore"
	"github.com/diana-gw/diana/store/stack"
)

// Options tune a Server.
type Options struct {
	// File is the config file the config came from. When set, it is checked for changes every
	// remote.interval (and at once on Reload), and a valid new version replaces the running
	// config; "" for a config read from elsewhere (dianad's embedded default).
	File string
	// Logger receives the server's logs; default slog.Default().
	Logger *slog.Logger
	// ShutdownTimeout bounds how long Run waits, once ctx ends, for the requests in flight;
	// default 30s.
	ShutdownTimeout time.Duration
}

// Server is dianad: the rate-limiting reverse proxy (Config.Listen) and the admin listener
// (Config.Admin.Listen) with the decision API, metrics and health check.
type Server struct {
	cfg  *Config // as started: the listeners, Redis and the remote source come from it
	opts Options
	log  *slog.Logger
	met  *metrics

	// limited is log at most a line a second of each message (lograte), for the events a flood
	// repeats, all counted in the metrics: denials, shadow denials, backend and upstream
	// failures, refused requests and streams. log keeps the lines that are never dropped.
	limited *slog.Logger

	mem     *memstore.Store
	rdb     redis.UniversalClient // nil without a redis section
	rstore  *redisstore.Store     // the cluster rules' state, for the admin operations; nil likewise
	cluster *failover.Store       // nil without a redis section
	stack   *stack.Stack          // the glue around the store (logs, batched units); nil likewise

	live      atomic.Pointer[live]
	transport *http.Transport

	loader     *config.Loader[*Config] // nil when there is nothing to reload from
	remoteName string                  // the remote source's name, "" without one
	reloads    reloadState

	proxyLn, adminLn   net.Listener // nil when not configured
	proxySrv, adminSrv *http.Server
	stopping           atomic.Bool

	settledLocal ticketRecord // the settle tickets settled, when Redis does not record them (settle.go)

	rls *rlsState // nil without an rls section
}

// live is the running config's request-time state, all that a config reload replaces: one
// pointer swap (setLive) replaces it whole, and every request loads it once, at its start, and
// keeps that snapshot to its end (routing, limiting, the leases given back, the access log).
type live struct {
	engine    *rules.Engine
	opts      httplimit.Options // how a request is read (client address, consumer); its denials logged
	upstreams []*upstream
	accessLog bool
}

// New prepares a server for cfg: it opens the listeners (so that their addresses are known
// before Run; port 0 picks a free one), the stores and the Redis client. Nothing is served until
// Run.
func New(cfg *Config, o Options) (s *Server, err error) {
	if cfg == nil {
		return nil, errors.New("server: no config")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.ShutdownTimeout <= 0 {
		o.ShutdownTimeout = 30 * time.Second
	}
	s = &Server{cfg: cfg, opts: o, log: o.Logger, limited: slog.New(lograte.New(o.Logger.Handler())), met: newMetrics(),
		settledLocal: ticketRecord{max: maxRecorded}}
	srv := s // s is nil by the time a failed New returns
	defer func() {
		if err != nil {
			srv.close()
		}
	}()
	s.mem = memstore.New(memstore.Options{MaxEntries: cfg.LocalStore.MaxKeys})
	s.met.localStore(s.mem)
	if cfg.Redis != nil {
		st, err := stack.New(*cfg.Redis, stack.Hooks{Log: s.log, Local: s.mem,
			OnState: s.met.breakerOpen, OnStarved: func(time.Duration) { s.met.starved.Inc() }, Observe: s.met.observeRedis,
			OnWriteBackLost: func(units int64) { s.met.writeBackLost.Add(float64(units)) }})
		if err != nil {
			return nil, fmt.Errorf("server: redis: %w", err)
		}
		s.rdb, s.rstore, s.cluster, s.stack = st.Client, st.Redis, st.Store, st
		s.met.batches(st.Batch)
		s.met.shares(st.Shares)
	}
	s.transport = NewTransport()
	if err := s.setLive(cfg); err != nil {
		return nil, err
	}
	s.met.configInfo(sourceKind(s.initialSource()))

	if cfg.Remote.URL != "" || cfg.Remote.RedisKey != "" || o.File != "" {
		s.newLoader()
	}

	if cfg.Listen != "" {
		ln, err := net.Listen("tcp", cfg.Listen)
		if err != nil {
			return nil, fmt.Errorf("server: listen: %w", err)
		}
		s.proxyLn = s.limitConns(ln, "proxy", maxConns(cfg.Connections.Max, proxyListener, cfg.RLS != nil))
	}
	if cfg.Admin.Listen != "" {
		ln, err := net.Listen("tcp", cfg.Admin.Listen)
		if err != nil {
			return nil, fmt.Errorf("server: admin.listen: %w", err)
		}
		s.adminLn = s.limitConns(ln, "admin", maxConns(cfg.Admin.Connections.Max, adminListener, cfg.RLS != nil))
		if cfg.Admin.Token == "" && !loopback(cfg.Admin.Listen) {
			s.log.Warn("admin listener open to every client that reaches it (admin.allow_unauthenticated): anyone can spend any client's quota and start bans through /v1/check; set admin.token",
				"addr", cfg.Admin.Listen)
		}
	}
	if cfg.RLS != nil {
		if err := s.newRLS(); err != nil {
			return nil, err
		}
	}
	errorLog := slog.NewLogLogger(s.log.Handler(), slog.LevelDebug)
	s.proxySrv = newHTTPServer(s.proxyHandler(), cfg.Connections, errorLog)
	s.adminSrv = newHTTPServer(s.adminHandler(), cfg.Admin.Connections, errorLog)
	return s, nil
}

// ProxyAddr returns the address the reverse proxy listens on, "" without one.
func (s *Server) ProxyAddr() string { return addr(s.proxyLn) }

// AdminAddr returns the address of the admin listener, "" without one.
func (s *Server) AdminAddr() string { return addr(s.adminLn) }

func addr(l net.Listener) string {
	if l == nil {
		return ""
	}
	return l.Addr().String()
}

// Reload asks for the config file to be read and the remote source fetched now (SIGHUP). It
// does not wait; a valid new config takes effect as soon as it is read. Without a file or a
// remote source it does nothing.
func (s *Server) Reload() {
	if s.loader != nil {
		s.loader.Reload()
	}
	if s.rls != nil {
		select {
		case s.rls.reload <- struct{}{}:
		default: // one is pending already
		}
	}
}

// Run serves until ctx ends, then shuts down gracefully: it stops accepting connections, waits
// up to Options.ShutdownTimeout for the requests in flight (the admin listener answers /healthz
// with 503 meanwhile), and closes the Redis client. It returns nil after a clean shutdown, or
// the error that stopped a listener or the shutdown. Run may be called once.
func (s *Server) Run(ctx context.Context) error {
	bg, stopBg := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	defer func() {
		stopBg()
		wg.Wait()
		s.close()
	}()

	if s.loader != nil {
		// The remote source, if reachable and valid, wins over the file from the start.
		if err := s.loader.Load(ctx); err != nil {
			s.log.Warn("config: keeping the config read at start", "err", err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); s.loader.Run(bg) }()
	}
	wg.Add(1)
	go func() { defer wg.Done(); every(bg, time.Minute, s.sweep) }()
	if s.stack != nil {
		wg.Add(1)
		go func() { defer wg.Done(); s.stack.Run(bg) }()
	}
	if s.rdb != nil {
		wg.Add(1)
		go func() { defer wg.Done(); s.checkRedis(bg) }()
	}

	if s.rls != nil {
		wg.Add(1)
		go func() { defer wg.Done(); s.watchRLS(bg) }()
	}
	errc := make(chan error, 3)
	serve := func(srv *http.Server, l net.Listener, name string) {
		if l == nil {
			return
		}
		s.log.Info("listening", "listener", name, "addr", l.Addr().String())
		go func() {
			if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("server: %s: %w", name, err)
			}
		}()
	}
	serve(s.proxySrv, s.proxyLn, "proxy")
	serve(s.adminSrv, s.adminLn, "admin")
	if s.rls != nil {
		s.serveRLS(errc)
	}

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-errc:
	}

	s.log.Info("shutting down: finishing the requests in flight", "timeout", s.opts.ShutdownTimeout)
	s.stopping.Store(true)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.ShutdownTimeout)
	defer cancel()
	// The proxy drains first; the admin listener stays up meanwhile, so that /healthz reports
	// 503 and in-flight decision calls finish.
	if err := s.proxySrv.Shutdown(sctx); err != nil {
		s.proxySrv.Close()
		runErr = errors.Join(runErr, fmt.Errorf("server: proxy shutdown: %w", err))
	}
	if s.rls != nil {
		runErr = errors.Join(runErr, s.stopRLS(sctx))
	}
	if err := s.adminSrv.Shutdown(sctx); err != nil {
		s.adminSrv.Close()
		runErr = errors.Join(runErr, fmt.Errorf("server: admin shutdown: %w", err))
	}
	if s.stack != nil { // no more decisions: the batched units held go back to Redis
		s.stack.Shutdown(sctx)
	}
	s.log.Info("stopped")
	return runErr
}

// sweep drops the local store's expired entries, giving their memory back (called every minute).
func (s *Server) sweep(context.Context) {
	if n := s.mem.Sweep(); n > 0 {
		s.log.Debug("local store swept", "dropped", n)
	}
}

// every calls f every d until ctx ends.
func every(ctx context.Context, d time.Duration, f func(context.Context)) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f(ctx)
		}
	}
}

// redisStartCheck bounds the PING that tells, at start, whether Redis can be used.
const redisStartCheck = 5 * time.Second

// checkRedis says at start whether Redis answers, and if not why (a wrong password, TLS, a
// refused connection), so that a mistake in the redis section shows before the first request
// fails over to on_error. It does not hold up the start: Redis may come up later.
func (s *Server) checkRedis(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, redisStartCheck)
	defer cancel()
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			return // shutting down
		}
		s.log.Error("Redis cannot be used: cluster rules follow their on_error policy until it can",
			"addrs", s.cfg.Redis.Addrs, "err", err)
		return
	}
	s.log.Info("Redis answers", "addrs", s.cfg.Redis.Addrs)
}

// close releases what New opened: the listeners (when Run never served them), the idle upstream
// connections and the Redis client.
func (s *Server) close() {
	ls := []net.Listener{s.proxyLn, s.adminLn}
	if s.rls != nil {
		ls = append(ls, s.rls.ln)
	}
	for _, l := range ls {
		if l != nil {
			l.Close() // already closed after Serve; the error says nothing new
		}
	}
	if s.transport != nil {
		s.transport.CloseIdleConnections()
	}
	if s.rdb != nil {
		if err := s.rdb.Close(); err != nil && !errors.Is(err, redis.ErrClosed) {
			s.log.Warn("closing the Redis client", "err", err)
		}
	}
}

// logDenial logs a refused request: its rule, client and numbers, at most one line a second
// (with the count of those held back), so that a flood cannot flood the log; the metrics count
// every one. The identity's key is left out: it may hold an API key.
func (s *Server) logDenial(in *rules.Input, res *rules.Result) {
	const msg = "request denied"
	if !lograte.Due(s.limited, slog.LevelInfo, msg) { // a line held back is not built: a flood of denials allocates nothing for it
		return
	}
	rule := ""
	if res.Rule != nil {
		rule = res.Rule.Name
	}
	retry := "never"
	if res.Decision.RetryAfter != algos.Never {
		retry = strconv.FormatInt(rules.Seconds(res.Decision.RetryAfter), 10) + "s"
	}
	s.limited.Info(msg, "rule", rule, "client", in.ClientName(), "method", in.Method, "path", in.Path,
		"limit", res.Decision.Limit, "retry_after", retry)
}

// observe is the engine's hook, called once per rule decided for a request.
// unseen is the usage of a response the decision APIs (/v1/check, /v1/auth) never see: the
// rule's fallback is charged.
func unseen(*rules.Rule) (int64, error) { return 0, errUnseen }

var errUnseen = fmt.Errorf("%w: the decision API does not see the response (a usage rule belongs in the proxy)", usage.ErrMissing)

// settled is told what a usage rule charged when a response ended: counted, and when the usage
// could not be read (the fallback charged) or the store could not take it, logged.
func (s *Server) settled(st rules.Settled) {
	s.met.usageTokens.WithLabelValues(st.Rule.Name).Add(float64(st.Cost))
	if st.Err != nil {
		s.met.usageUnread.WithLabelValues(st.Rule.Name, usage.Class(st.Err)).Inc()
		s.limited.LogAttrs(context.Background(), slog.LevelWarn, "response usage unread: charged the rule's fallback",
			slog.String("rule", st.Rule.Name), slog.Int64("cost", st.Cost), slog.Any("err", st.Err))
	}
	if st.StoreErr != nil {
		s.met.backendError(st.Rule.Name)
		s.limited.LogAttrs(context.Background(), slog.LevelWarn, "rate-limit backend failed to settle a response's cost: settled by the rule's on_error policy",
			slog.String("rule", st.Rule.Name), slog.String("on_error", st.Rule.OnError.String()), slog.Any("err", st.StoreErr))
	}
}

func (s *Server) observe(r *rules.Rule, in *rules.Input, o rules.Outcome, err error) {
	s.met.decision(r.Name, o)
	if err != nil {
		s.met.backendError(r.Name)
		s.limited.LogAttrs(context.Background(), slog.LevelWarn, "rate-limit backend failed: decided by the rule's on_error policy",
			slog.String("rule", r.Name), slog.String("on_error", r.OnError.String()), slog.String("client", in.ClientName()), slog.Any("err", err))
	}
	if o == rules.ShadowDenied {
		s.limited.LogAttrs(context.Background(), slog.LevelInfo, "shadow rule would deny the request",
			slog.String("rule", r.Name), slog.String("client", in.ClientName()))
	}
}
