// Package stack builds the cluster-mode store of a front end, the same for dianad and the Kong
// plugin, so that the two cannot drift: a Redis client (TLS, ACL user, Sentinel or Cluster),
// redisstore (the scripts, WAIT for replicas), batch (batched rules) and failover (the timeout,
// the breaker and the fail policies, with the learned shares of on_error local and the
// write-back of what a node admitted alone during an outage), in that order.
//
// It holds what the front ends share around that stack, each stated once:
//   - Redis, cluster mode's settings: one type, with its defaults, bounds, conflicts and the
//     reading of its TLS files, that dianad's config decoder and the Kong plugin's field reader
//     both fill (each keeps its own field names and wording, which users see, and says whether a
//     conflict is refused or ignored with a warning). It lives here, not in redisstore, because it
//     spans every layer of the stack: the connection (redisstore.Conn, embedded), the keys'
//     prefix and WAIT (redisstore), the timeout and the breaker (failover).
//   - The glue: the breaker's state changes, the Redis timeouts of a starved process, the
//     failed exchanges of the learned shares and the units given up writing back after an
//     outage are logged here (rate-limited), the batched units
//     are given back every second (Run) and at shutdown (Shutdown). A front end passes only what
//     differs: its logger and its metrics hooks (Hooks).
package stack

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/diana-gw/diana/internal/lograte"
	"github.com/diana-gw/diana/store/batch"
	"github.com/diana-gw/diana/store/failover"
	"github.com/diana-gw/diana/store/memstore"
	"github.com/diana-gw/diana/store/redisstore"
)

// Hooks are what differs between front ends: where the logs go and what the metrics count.
type Hooks struct {
	Log   *slog.Logger    // default slog.Default()
	Local *memstore.Store // the store of the FailLocal policy; nil: failover's own
	// Metrics, as failover.Options has them; the logging is the stack's.
	OnState   func(open bool)
	OnStarved func(wait time.Duration)
	Observe   func(d time.Duration, err error)
	// OnWriteBackLost is told of units a node admitted alone during an outage and could not
	// write back into Redis (failover.Options.OnWriteBack).
	OnWriteBackLost func(units int64)
}

// Stack is a cluster-mode store and its parts, which some front ends use on their own (the
// admin operations, the batch metrics, a Redis remote config source).
type Stack struct {
	Client redis.UniversalClient
	Redis  *redisstore.Store
	Batch  *batch.Store
	Shares *failover.Shares // each on_error local rule's learned share of the traffic
	Store  *failover.Store  // the rules.Store of cluster mode

	h       Hooks
	limited *slog.Logger // h.Log at most a line a second of each message (lograte); the breaker's states go to h.Log
}

// New opens the client and builds the store; it fails if the connection's settings are
// invalid (see redisstore.Conn.TLSConfig). It does not contact Redis.
func New(r Redis, h Hooks) (*Stack, error) {
	c, err := redisstore.Open(r.Conn)
	if err != nil {
		return nil, fmt.Errorf("stack: %w", err)
	}
	if h.Log == nil {
		h.Log = slog.Default()
	}
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	s := &Stack{Client: c, h: h, limited: slog.New(lograte.New(h.Log.Handler()))}
	s.Redis = redisstore.New(c, redisstore.Options{Prefix: r.Prefix, WaitReplicas: r.Wait, WaitTimeout: timeout * 3 / 4})
	s.Batch = batch.New(s.Redis, batch.Options{})
	s.Shares = failover.NewShares(c, failover.ShareOptions{Prefix: r.Prefix, OnError: s.shareError})
	s.Store = failover.New(s.Batch, failover.Options{Timeout: timeout, Failures: r.Failures, OpenFor: r.OpenFor,
		Local: h.Local, Shares: s.Shares, OnState: s.state, OnStarved: s.starved, Observe: h.Observe,
		WriteBack: s.Redis.WriteBack, OnWriteBack: s.writeBackLost})
	return s, nil
}

// state is told when the breaker opens or closes.
func (s *Stack) state(open bool) {
	if s.h.OnState != nil {
		s.h.OnState(open)
	}
	if open {
		s.h.Log.Warn("Redis circuit breaker open: cluster rules follow their on_error policy until Redis answers again")
	} else {
		s.h.Log.Info("Redis circuit breaker closed: Redis answers again")
	}
}

// starved is told of a Redis timeout the breaker did not count, this process itself being
// short of CPU.
func (s *Stack) starved(wait time.Duration) {
	if s.h.OnStarved != nil {
		s.h.OnStarved(wait)
	}
	s.limited.LogAttrs(context.Background(), slog.LevelWarn, "Redis timed out while this process was starved of CPU: not counted against Redis (the breaker stays closed); the request got its on_error decision",
		slog.Duration("scheduling_wait", wait))
}

// shareError is told of a failed exchange of the learned shares (on_error local).
func (s *Stack) shareError(err error) {
	s.limited.Warn("cannot exchange this node's traffic shares with Redis: on_error local keeps the shares learned before, or the limit divided by nodes",
		"err", err)
}

// writeBackLost is told of units admitted during an outage that this node gave up writing back:
// Redis's state does not know of them, so the cluster may admit them again.
func (s *Stack) writeBackLost(key string, units int64, err error) {
	if s.h.OnWriteBackLost != nil {
		s.h.OnWriteBackLost(units)
	}
	s.limited.Warn("could not write back into Redis the units this node admitted alone during the Redis outage (on_error local): the cluster may admit them again",
		"key", key, "units", units, "err", err)
}

// Run gives the batched units that expired unspent back to Redis every second until ctx ends,
// so that a key whose traffic stopped gets them back within their window (batch.Store.Flush).
func (s *Stack) Run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fctx, cancel := context.WithTimeout(ctx, time.Second)
			if err := s.Batch.Flush(fctx); err != nil { // a failed refund loses its units, as expiry would
				s.h.Log.Debug("batched units not given back", "err", err)
			}
			cancel()
		}
	}
}

// Shutdown gives every batched unit held back to Redis, once no more decisions come, within
// ctx; it logs what it could not give back. It does not close the client.
func (s *Stack) Shutdown(ctx context.Context) {
	if err := s.Batch.Close(ctx); err != nil {
		s.h.Log.Warn("batched units not given back", "err", err)
	}
}
