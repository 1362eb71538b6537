// Package redisstore runs the algorithms of shared/algos in Redis, so that every gateway node
// shares one limit. State changes only inside each algorithm's Lua twin (shared/algos/scripts):
// one EVALSHA of its script for a lone decision (go-redis reloads the script on NOSCRIPT) or, for
// many (Decide, and DecideTogether's limits of one request, all or nothing), one EVALSHA of the
// mixed script (scripts.Mixed) per Redis slot; time from Redis TIME, a TTL on every key the script
// writes, and the keys of one identity under one hash tag, so the same code runs on a standalone
// Redis, behind Sentinel or on a Redis Cluster.
package redisstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/algos/scripts"
	"github.com/diana-gw/diana/shared/rules"
)

// Options tune a Store.
type Options struct {
	// Prefix starts every key; default DefaultPrefix.
	Prefix string
	// CallerClock sends Request.Now to the scripts instead of letting them read Redis TIME:
	// for replays in virtual time, the simulator's (package sim, which make report runs) and the
	// tests'. The scripts then keep every key an hour past its TTL (prelude.lua's pad), as
	// Redis expires keys on its own clock. A gateway never sets it: it decides on Redis's clock,
	// one for the whole cluster.
	CallerClock bool
	// WaitReplicas, if above 0, makes every round trip that changes state end with WAIT: a
	// decision counts only once that many replicas have its write, within WaitTimeout (default
	// 50ms); else it fails with ErrNotReplicated and the caller's fail policy decides. Redis
	// replicates asynchronously, so without it a failover can lose counts the old master
	// acknowledged (a Sentinel failover of a running master lost hundreds in the tests), and
	// those requests are admitted again. A standalone or Sentinel master only: on a Redis
	// Cluster, WAIT has no key to be routed by.
	WaitReplicas int
	WaitTimeout  time.Duration
}

// ErrNotReplicated is the error of a decision whose write did not reach Options.WaitReplicas
// replicas in time: a failover could lose it, so it is not trusted. Redis may keep it.
var ErrNotReplicated = errors.New("redisstore: the decision's write did not reach enough replicas")

// Store decides requests in Redis.
type Store struct {
	c       redis.UniversalClient
	o       Options
	scripts map[string]*lua // by algorithm (Script().Name)
	mixed   *redis.Script   // scripts.Mixed
	cluster bool            // a Redis Cluster client: calls are not shared (see coalesce.go)
	co      coalescer
	dials   dials

	wbMu       sync.Mutex
	writeBacks map[string]*redis.Script // each algorithm's write-back script, made on first use (writeback.go)
}

// New returns a Store on c, which may be a standalone, Sentinel (failover) or Cluster client.
// For Decide to honour context deadlines, c must be made with ContextTimeoutEnabled; otherwise
// go-redis waits for its own read and write timeouts. New adds a hook to c that watches its
// connection attempts (see dials).
func New(c redis.UniversalClient, o Options) *Store {
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	_, cluster := c.(*redis.ClusterClient)
	s := &Store{c: c, o: o, scripts: map[string]*lua{}, cluster: cluster}
	s.co.work = make(chan []*waiter)
	if c != nil { // nil: a Store for Keys alone
		c.AddHook(&s.dials)
	}
	for i, name := range scripts.Names() {
		single, _ := scripts.Source(name)
		s.scripts[name] = &lua{single: redis.NewScript(single), index: int64(i + 1), whole: scripts.Whole(name)}
	}
	s.mixed = mixedScript()
	return s
}

// mixedScript is scripts.Mixed, made once: go-redis hashes its 70 KB on every NewScript.
var mixedScript = sync.OnceValue(func() *redis.Script { return redis.NewScript(scripts.Mixed()) })

// lua is an algorithm's script of one decision (scripts.Source), and its place in the mixed
// script (scripts.Mixed).
type lua struct {
	single *redis.Script
	index  int64 // in scripts.Names, from 1: the algorithm's number in the mixed script
	whole  bool  // scripts.Whole: one key and one argument per decision
}

// Keys returns the state key and the ban key of an identity: both carry the identity as their
// hash tag, so they live in one Redis Cluster slot. A hash tag ends at the first '}' and an empty
// one hashes the whole key, so an identity that is empty or holds a '}' gets a tag with each '}'
// made ')' (or "_" if empty), followed by the identity itself to keep keys unique.
func (s *Store) Keys(key string) (state, ban string) {
	state = s.stateKey(key)
	return state, state + ":ban"
}

// stateKey is the state key of Keys.
func (s *Store) stateKey(key string) string {
	if key != "" && strings.IndexByte(key, '}') < 0 {
		return s.o.Prefix + "{" + key + "}"
	}
	tag := strings.ReplaceAll(key, "}", ")")
	if tag == "" {
		tag = "_"
	}
	return s.o.Prefix + "{" + tag + "}:" + key
}

// DecideOne applies r to the identity key under alg, atomically in Redis, in one round trip. An
// error (Redis down, timeout, context done) is returned as such and is never a denial: the
// caller's fail policy decides what it means.
//
// A dry run (r.DryRun) replies the decision the same request would get and writes nothing: no
// state, no TTL, no ban. A release cannot be a dry run: that request gets an error, with no round
// trip (the memory store answers it, on a copy of the state; rules never ask for one).
func (s *Store) DecideOne(ctx context.Context, key string, alg algos.Algorithm, r algos.Request) (algos.Decision, error) {
	op := rules.Op{Key: key, Alg: alg, Req: r}
	ops := [1]*rules.Op{&op}
	s.Decide(ctx, ops[:])
	return op.Dec, op.Err
}

// answer sets op's decision or error, and for a partial request that Redis granted units, the
// time they count at in op.Req.Now (see rules.Op.Req).
func answer(op *rules.Op, d algos.Decision, at int64, err error) {
	op.Dec, op.Err = d, err
	if err == nil && op.Req.Partial && d.Granted > 0 {
		op.Req.Now = at
	}
}

// decision reads the reply of e's script on key, or its error (see decisionOf).
func (s *Store) decision(e *eval, key string, cmd *redis.Cmd, unsent error) (algos.Decision, int64, error) {
	v, err := s.reply(cmd, unsent)
	return decisionOf(e, key, v, err)
}

// reply is cmd's reply, or its error: the pipeline's when cmd was not sent at all.
func (s *Store) reply(cmd *redis.Cmd, unsent error) (any, error) {
	if cmd.Err() == nil && cmd.Val() == nil && unsent != nil {
		return nil, fmt.Errorf("not sent: %w", s.dials.explain(unsent))
	}
	return cmd.Val(), s.dials.explain(cmd.Err())
}

// decisionOf reads the reply v of e's decision on key, or its error.
func decisionOf(e *eval, key string, v any, err error) (algos.Decision, int64, error) {
	if err != nil {
		return algos.Decision{}, 0, fmt.Errorf("redisstore: %s on %q: %w", e.name, key, err)
	}
	vs, _ := v.([]any)
	var res [8]int64
	for i, x := range vs {
		n, ok := x.(int64)
		if !ok || i == len(res) {
			return algos.Decision{}, 0, fmt.Errorf("redisstore: %s on %q: reply %v: want 2, 7 or 8 integers", e.name, key, v)
		}
		res[i] = n
	}
	return decisionFrom(e, key, &res, len(vs))
}

// decisionFrom reads the n integers of a reply to e's decision on key: {allowed, limit,
// remaining, reset_after, retry_after, delay, granted}, and the stamp that ends a partial
// request's (see answer); or, for the usual answer, the whole cost admitted at once,
// {remaining, reset_after} (see prelude.lua's apply).
func decisionFrom(e *eval, key string, res *[8]int64, n int) (algos.Decision, int64, error) {
	if n == 2 {
		return algos.Decision{Allowed: true, Limit: e.limit, Remaining: res[0], ResetAfter: res[1], Granted: e.cost}, 0, nil
	}
	if n != 7 && n != 8 {
		return algos.Decision{}, 0, fmt.Errorf("redisstore: %s on %q: reply %v: want 2, 7 or 8 integers", e.name, key, slices.Clone(res[:n]))
	}
	d := algos.Decision{
		Allowed: res[0] == 1, Limit: res[1], Remaining: res[2],
		ResetAfter: res[3], RetryAfter: res[4], Delay: res[5], Granted: res[6],
	}
	var at int64
	if n == 8 && d.Granted > 0 {
		at = res[7]
	}
	return d, at, nil
}

// State reads what Redis holds for an identity, in the form the algorithm's Go twin keeps it:
// State.W from the words of a string state (State.Log from those beyond W) or from a counter's
// hash, State.Log from the scores of a sorted set, State.Ban from the ban key. For inspection and tests.
func (s *Store) State(ctx context.Context, key string, alg algos.Algorithm) (algos.State, error) {
	var st algos.State
	stateKey, banKey := s.Keys(key)
	p := s.c.Pipeline()
	ban := p.Get(ctx, banKey)
	var words *redis.StringCmd
	var log *redis.ZSliceCmd
	var hash *redis.MapStringStringCmd
	switch sc := alg.Script(); {
	case sc.Log:
		log = p.ZRangeWithScores(ctx, stateKey, 0, -1)
	case sc.Hash:
		hash = p.HGetAll(ctx, stateKey)
	default:
		words = p.Get(ctx, stateKey)
	}
	if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return st, fmt.Errorf("redisstore: read state of %q: %w", key, err)
	}
	if b, err := ban.Int64(); err == nil {
		st.Ban = b
	} else if !errors.Is(err, redis.Nil) {
		return st, fmt.Errorf("redisstore: read %s: %w", banKey, err)
	}
	if log != nil {
		for _, z := range log.Val() {
			st.Log = append(st.Log, int64(z.Score))
		}
		return st, nil
	}
	if hash != nil {
		return hashState(stateKey, hash.Val(), alg.Script().Args[0], st)
	}
	v, err := words.Result()
	if errors.Is(err, redis.Nil) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("redisstore: read %s: %w", stateKey, err)
	}
	fields := strings.Fields(v)
	if max := len(st.W) + alg.Script().Words; len(fields) > max {
		return st, fmt.Errorf("redisstore: %s holds %q: more than %d words", stateKey, v, max)
	}
	for i, w := range fields {
		x, err := strconv.ParseInt(w, 10, 64)
		if err != nil {
			return st, fmt.Errorf("redisstore: %s holds %q: %w", stateKey, v, err)
		}
		if i < len(st.W) {
			st.W[i] = x
		} else {
			st.Log = append(st.Log, x) // the words beyond W (Script.Words)
		}
	}
	return st, nil
}

// hashState reads a Script.Hash state, h, into st: its one field is the index of a window of
// window µs, holding its count.
func hashState(key string, h map[string]string, window int64, st algos.State) (algos.State, error) {
	if len(h) > 1 {
		return st, fmt.Errorf("redisstore: %s holds %d windows, want at most one", key, len(h))
	}
	for f, v := range h {
		idx, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return st, fmt.Errorf("redisstore: %s holds window %q: %w", key, f, err)
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return st, fmt.Errorf("redisstore: %s holds count %q: %w", key, v, err)
		}
		st.W[0], st.W[1] = idx*window, n
	}
	return st, nil
}

// dials remembers why the client's last connection attempt failed, until one succeeds. go-redis
// retries a call whose connection failed (a refused dial, a reset) with a back-off, and a call
// whose deadline ends meanwhile returns only the context's error: with Redis refusing
// connections, every decision would fail with "context deadline exceeded" and never say why.
type dials struct{ last atomic.Pointer[error] }

func (d *dials) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		switch {
		case err == nil:
			d.last.Store(nil)
		case ctx.Err() == nil: // a dial the deadline cut short says nothing new
			d.last.Store(&err)
		}
		return c, err
	}
}

func (*dials) ProcessHook(redis.ProcessHook) redis.ProcessHook                         { return nil }
func (*dials) ProcessPipelineHook(redis.ProcessPipelineHook) redis.ProcessPipelineHook { return nil }

// explain adds to err, if it is the context's, why the last connection attempt failed, if it
// did: what the client was retrying when the deadline came. err still matches the context's.
func (d *dials) explain(err error) error {
	if err == nil || !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		return err
	}
	last := d.last.Load()
	if last == nil {
		return err
	}
	return fmt.Errorf("%w, retried until %w", *last, err)
}

// appendInts appends vs as MessagePack integers: a positive fixint below 128, else an int 64.
func appendInts(b []byte, vs ...int64) []byte {
	for _, v := range vs {
		if v >= 0 && v < 128 {
			b = append(b, byte(v))
			continue
		}
		b = append(b, 0xd3)
		b = binary.BigEndian.AppendUint64(b, uint64(v))
	}
	return b
}
