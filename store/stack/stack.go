// Package stack builds the cluster-mode store of a front end, the same for dianad and the Kong
// plugin, so that the two cannot drift: a Redis client (TLS, ACL user, Sentinel or Cluster),
// redisstore (the scripts, WAIT for replicas), batch (batched rules) and failover (the timeout,
// the breaker and the fail policies, with the learned shares of on_error local), in that order.
package stack

import (
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/diana-gw/diana/store/batch"
	"github.com/diana-gw/diana/store/failover"
	"github.com/diana-gw/diana/store/memstore"
	"github.com/diana-gw/diana/store/redisstore"
)

// Options say how to reach Redis and how to fail when it cannot decide.
type Options struct {
	Conn         redisstore.Conn
	Prefix       string // of every key
	WaitReplicas int    // replicas a decision's write must reach before it counts (WAIT); 0: none
	// Timeout bounds a decision's round trip; WAIT gets 3/4 of it, past which the decision
	// fails and the rule's fail policy decides. Failures and OpenFor tune the breaker.
	Timeout  time.Duration
	Failures int
	OpenFor  time.Duration
	Local    *memstore.Store // the store of the FailLocal policy; nil: failover's own
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
