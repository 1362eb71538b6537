// Package stack builds the cluster-mode store of a front end, the same for dianad and the Kong
// plugin, so that the two cannot drift: a Redis client (TLS, ACL user, Sentinel or Cluster),
// redisstore (the scripts, WAIT for replicas), batch (batched rules) and failover (the timeout,
// the breaker and the fail policies, with the learned shares of on_error local), in that order.
//
// Settings are what an operator configures of it, stated once with their defaults (Defaults)
// and the ties between them (WaitRoutable, SentinelAndCluster); dianad's config file and the
// Kong plugin's fields are two readers that fill them. Logger is the glue both front ends want
// around the stack: rate-limited log lines for what the stack reports.
package stack

import (
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/diana-gw/diana/internal/lograte"
	"github.com/diana-gw/diana/store/batch"
	"github.com/diana-gw/diana/store/failover"
	"github.com/diana-gw/diana/store/memstore"
	"github.com/diana-gw/diana/store/redisstore"
)

// Settings say how to reach Redis and how to fail when it cannot decide.
type Settings struct {
	redisstore.Conn
	Prefix       string // of every key
	WaitReplicas int    // replicas a decision's write must reach before it counts (WAIT); 0: none
	// Timeout bounds a decision's round trip; WAIT gets 3/4 of it, past which the decision
	// fails and the rule's fail policy decides. Failures in a row open the breaker, which
	// stays open OpenFor before a probe.
	Timeout  time.Duration
	Failures int
	OpenFor  time.Duration
}

// Defaults returns the settings an operator has not given: the keys' prefix and the failure
// settings.
func Defaults() Settings {
	return Settings{Prefix: redisstore.DefaultPrefix, Timeout: failover.DefaultTimeout,
		Failures: failover.DefaultFailures, OpenFor: failover.DefaultOpenFor}
}

// The bounds of Settings, which the front ends' readers check.
const (
	MinTimeout, MaxTimeout = time.Millisecond, time.Minute
	MinOpenFor, MaxOpenFor = time.Millisecond, time.Hour
	MaxFailures            = 1000
	MaxWaitReplicas        = 16
)

// SentinelAndCluster reports whether s asks for a Sentinel master and a Cluster at once, which
// cannot be: the addresses are Sentinels or Cluster nodes.
func (s *Settings) SentinelAndCluster() bool { return s.MasterName != "" && s.Cluster }

// WaitRoutable reports whether WaitReplicas can be honoured: WAIT has no key, so a Redis
// Cluster cannot route it.
func (s *Settings) WaitRoutable() bool {
	return s.WaitReplicas == 0 || !s.Cluster && (len(s.Addrs) <= 1 || s.MasterName != "")
}

// Options are the settings and what the front end wants told.
type Options struct {
	Settings
	Local *memstore.Store // the store of the FailLocal policy; nil: failover's own
	// Hooks, as failover.Options has them.
	OnState   func(open bool)
	OnStarved func(wait time.Duration)
	Observe   func(d time.Duration, err error)
	// OnShareError is failover.ShareOptions.OnError.
	OnShareError func(err error)
}

// Stack is a cluster-mode store and its parts, which some front ends use on their own (the
// admin operations, the batch metrics, a Redis remote config source).
type Stack struct {
	Client redis.UniversalClient
	Redis  *redisstore.Store
	Batch  *batch.Store
	Shares *failover.Shares // each on_error local rule's learned share of the traffic
	Store  *failover.Store  // the rules.Store of cluster mode
}

// New opens the client and builds the store; it fails if the connection's settings are
// invalid (see redisstore.Conn.TLSConfig). It does not contact Redis.
func New(o Options) (*Stack, error) {
	c, err := redisstore.Open(o.Conn)
	if err != nil {
		return nil, fmt.Errorf("stack: %w", err)
	}
	s := &Stack{Client: c}
	s.Redis = redisstore.New(c, redisstore.Options{Prefix: o.Prefix, WaitReplicas: o.WaitReplicas, WaitTimeout: o.Timeout * 3 / 4})
	s.Batch = batch.New(s.Redis, batch.Options{})
	s.Shares = failover.NewShares(c, failover.ShareOptions{Prefix: o.Prefix, OnError: o.OnShareError})
	s.Store = failover.New(s.Batch, failover.Options{Timeout: o.Timeout, Failures: o.Failures, OpenFor: o.OpenFor,
		Local: o.Local, Shares: s.Shares, OnState: o.OnState, OnStarved: o.OnStarved, Observe: o.Observe})
	return s, nil
}

// Logger writes the log lines of what a stack reports, at most one a second of each kind (with
// the count of those held back), in the front end's words: Warn for trouble, Info for news.
type Logger struct {
	Warn, Info func(msg string, args ...any)

	starveLog, shareLog lograte.Limiter
}

// Starved logs a Redis timeout that the breaker did not count, the process itself being short
// of CPU (failover.Options.OnStarved).
func (l *Logger) Starved(wait time.Duration) {
	if ok, skipped := l.starveLog.Allow(); ok {
		l.Warn("Redis timed out while this process was starved of CPU: not counted against Redis (the breaker stays closed); the request got its rule's fail policy",
			"scheduling_wait", wait, "suppressed", skipped)
	}
}

// ShareError logs a failed exchange of the learned shares (failover.ShareOptions.OnError).
func (l *Logger) ShareError(err error) {
	if ok, skipped := l.shareLog.Allow(); ok {
		l.Warn("cannot exchange this node's traffic shares with Redis: on_error local keeps the shares learned before, or the limit divided by nodes",
			"err", err, "suppressed", skipped)
	}
}

// State logs the breaker's opening and closing (failover.Options.OnState).
func (l *Logger) State(open bool) {
	if open {
		l.Warn("Redis circuit breaker open: cluster rules follow their fail policy until Redis answers again")
	} else {
		l.Info("Redis circuit breaker closed: Redis answers again")
	}
}
