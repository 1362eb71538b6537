// Package redisstore runs the algorithms of shared/algos in Redis, so that every gateway node
// shares one limit. State changes only inside each algorithm's Lua twin (shared/algos/scripts):
// one EVALSHA per decision (go-redis reloads the script on NOSCRIPT) or, for many (Decide),
// one pipeline of EVALSHA of the algorithms' batch scripts; time from Redis TIME, a TTL on every
// key the script writes, and the keys of one identity under one hash tag, so the same code runs
// on a standalone Redis, behind Sentinel or on a Redis Cluster.
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
	for _, name := range scripts.Names() {
		single, _ := scripts.Source(name)
		batch, _ := scripts.Batch(name)
		s.scripts[name] = &lua{single: redis.NewScript(single), batch: redis.NewScript(batch), whole: scripts.Whole(name)}
	}
	return s
}

// lua is an algorithm's scripts: one decision (scripts.Source) and many (scripts.Batch).
type lua struct {
	single, batch *redis.Script
	whole         bool // scripts.Whole: one key and one argument per decision
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

// maxBatch is the most decisions one batch script call makes: Redis runs a script to its end
// before it serves anyone else, so a call of many decisions must not hold it for long (what a
// call costs Redis: docs/redis.md, "Tuning, as measured").
const maxBatch = 64

// command is one script call of a round trip: one op by its algorithm's script, or a run of
// ops of one algorithm by its batch script (scripts.Batch), whose reply holds each one's.
type command struct {
	first, n int   // the ops it decides: ops[first : first+n]
	e        *eval // ops[first]'s (the run's algorithm)
	keys     []string
	args     []any
	cmd      *redis.Cmd
	retried  bool // sent again with EVAL after NOSCRIPT
}

// script is what the command runs.
func (c *command) script() *redis.Script {
	if c.n > 1 {
		return c.e.lua.batch
	}
	return c.e.lua.single
}

// send decides ops in one round trip: one EVALSHA, or a pipeline of them, and EVAL for the
// commands that met NOSCRIPT. On a standalone or Sentinel Redis, a run of ops of one
// algorithm goes in one batch script call (up to maxBatch): Redis then pays a script call's
// overhead and its clock once for them all, and they share its time. Not on a Cluster, where
// a script's keys must share a slot.
func (s *Store) send(ctx context.Context, ops []*rules.Op) {
	if len(ops) == 1 && s.o.WaitReplicas <= 0 { // no pipeline to fill and parse
		op := ops[0]
		op.Dec, op.Err = algos.Decision{}, nil
		e, err := s.eval(op.Key, op.Alg, op.Req)
		if err != nil {
			op.Err = err
			return
		}
		keys, args := e.single()
		d, at, err := s.decision(e.name, op.Key, e.lua.single.Run(ctx, s.c, keys, args...), nil)
		answer(op, d, at, err)
		return
	}
	buf := sendBufs.Get().(*sendBuf)
	defer buf.put()
	buf.evals = slices.Grow(buf.evals[:0], len(ops))[:len(ops)]
	evals := buf.evals
	for i, op := range ops {
		op.Dec, op.Err = algos.Decision{}, nil
		if evals[i], op.Err = s.evalInto(&buf.packed, op.Key, op.Alg, op.Req); op.Err != nil {
			continue
		}
		if n := len(buf.cmds); n > 0 && !s.cluster {
			if last := &buf.cmds[n-1]; last.first+last.n == i && last.e.name == evals[i].name && last.n < maxBatch {
				last.n++
				continue
			}
		}
		buf.cmds = append(buf.cmds, command{first: i, n: 1, e: &evals[i]})
	}
	cmds := buf.cmds
	if len(cmds) == 0 {
		return
	}
	p := s.c.Pipeline()
	for i := range cmds {
		c := &cmds[i]
		if c.n == 1 {
			c.keys, c.args = c.e.single()
		} else {
			start := len(buf.keys)
			for _, e := range evals[c.first : c.first+c.n] {
				buf.keys, buf.args = e.appendBatch(buf.keys, buf.args)
			}
			c.keys, c.args = buf.keys[start:], buf.args[start:]
		}
		c.cmd = c.script().EvalSha(ctx, p, c.keys, c.args...)
	}
	wait := s.wait(ctx, p, ops)
	// Each command carries its own error, except when the pipeline could not be sent at all (no
	// connection, or one whose AUTH failed: WRONGPASS, NOAUTH): then only Exec returns it.
	_, execErr := p.Exec(ctx)
	// A NOSCRIPT command did not run: sending it again with the script's source applies it once.
	var retry redis.Pipeliner
	for i := range cmds {
		c := &cmds[i]
		if redis.HasErrorPrefix(c.cmd.Err(), "NOSCRIPT") {
			if retry == nil {
				retry = s.c.Pipeline()
			}
			c.cmd, c.retried = c.script().Eval(ctx, retry, c.keys, c.args...), true
		}
	}
	var rewait *redis.Cmd
	var reexecErr error
	if retry != nil {
		rewait = s.wait(ctx, retry, ops)
		_, reexecErr = retry.Exec(ctx)
	}
	for i := range cmds {
		c := &cmds[i]
		unsent, w := execErr, wait
		if c.retried {
			unsent, w = reexecErr, rewait
		}
		if c.n > 1 {
			s.answerBatch(c.e.name, ops[c.first:c.first+c.n], c.cmd, unsent)
		} else {
			d, at, err := s.decision(c.e.name, ops[c.first].Key, c.cmd, unsent)
			answer(ops[c.first], d, at, err)
		}
		for _, op := range ops[c.first : c.first+c.n] {
			if w != nil && op.Err == nil && !op.Req.DryRun {
				if n, err := w.Int64(); err != nil || n < int64(s.o.WaitReplicas) {
					op.Dec, op.Err = algos.Decision{}, fmt.Errorf("%w (%d of %d replicas, %v)", ErrNotReplicated, n, s.o.WaitReplicas, err)
				}
			}
		}
	}
}

// answer sets op's decision or error, and for a partial request that Redis granted units, the
// time they count at in op.Req.Now (see rules.Op.Req).
func answer(op *rules.Op, d algos.Decision, at int64, err error) {
	op.Dec, op.Err = d, err
	if err == nil && op.Req.Partial && d.Granted > 0 {
		op.Req.Now = at
	}
}

// wait adds WAIT to p when Options.WaitReplicas asks for it and p holds an op that writes.
func (s *Store) wait(ctx context.Context, p redis.Pipeliner, ops []*rules.Op) *redis.Cmd {
	if s.o.WaitReplicas <= 0 {
		return nil
	}
	for _, op := range ops {
		if op.Err == nil && !op.Req.DryRun {
			timeout := s.o.WaitTimeout
			if timeout <= 0 {
				timeout = 50 * time.Millisecond
			}
			return p.Do(ctx, "WAIT", s.o.WaitReplicas, timeout.Milliseconds())
		}
	}
	return nil
}

// eval is one decision, ready to send.
type eval struct {
	name       string // the algorithm's script, for error messages
	lua        *lua   // its scripts
	state, ban string // the identity's keys (ban only when banned)
	banned     bool   // the algorithm bans: the script reads the ban key
	packed     []byte // the integer arguments (see prelude.lua)
	id         string // the lease id, "" for none
}

// single is the keys and arguments of e's script.
func (e *eval) single() ([]string, []any) {
	keys := []string{e.state}
	if e.banned {
		keys = append(keys, e.ban) // the script reads the ban key only when it bans
	}
	args := []any{e.packed}
	if e.id != "" {
		args = append(args, e.id)
	}
	return keys, args
}

// appendBatch appends e's keys and arguments to a batch script's. Without a ban, the state key
// stands in for the ban key, which the script does not read then; a whole script takes neither
// the ban key nor the lease id.
func (e *eval) appendBatch(keys []string, args []any) ([]string, []any) {
	if e.lua.whole {
		return append(keys, e.state), append(args, e.packed)
	}
	id, ban := e.id, e.state
	if id == "" {
		id = "0"
	}
	if e.banned {
		ban = e.ban
	}
	return append(keys, e.state, ban), append(args, e.packed, id)
}

// sendBuf is a round trip's working memory, reused by later round trips: go-redis copies the
// keys and arguments into its commands, and send keeps nothing of it once it returns.
type sendBuf struct {
	evals  []eval
	cmds   []command
	keys   []string // the batch script calls' keys and arguments
	args   []any
	packed []byte // the evals' packed integers
}

// maxKept bounds the decisions of a sendBuf kept for reuse: a round trip of many does not keep
// its memory.
const maxKept = 4 * maxBatch

var sendBufs = sync.Pool{New: func() any { return new(sendBuf) }}

// put clears b, so that it holds no key or reply, and keeps it for reuse.
func (b *sendBuf) put() {
	if cap(b.evals) > maxKept {
		return
	}
	clear(b.evals)
	clear(b.cmds)
	clear(b.keys)
	clear(b.args)
	b.evals, b.cmds, b.keys, b.args, b.packed = b.evals[:0], b.cmds[:0], b.keys[:0], b.args[:0], b.packed[:0]
	sendBufs.Put(b)
}

// eval builds the decision that applies r to key under alg (see algos.Script).
func (s *Store) eval(key string, alg algos.Algorithm, r algos.Request) (eval, error) {
	var packed []byte
	return s.evalInto(&packed, key, alg, r)
}

// evalInto is eval, its packed integers appended to *packed (whose earlier bytes stay as they
// were: a new array when it grows).
func (s *Store) evalInto(packed *[]byte, key string, alg algos.Algorithm, r algos.Request) (eval, error) {
	r = r.Bounded()
	sc := alg.Script()
	l, ok := s.scripts[sc.Name]
	if !ok {
		return eval{}, fmt.Errorf("redisstore: algorithm %q has no Lua script", sc.Name)
	}
	now := int64(-1)
	if s.o.CallerClock {
		now = r.Now
	}
	flags := int64(0)
	if r.Partial {
		flags |= 1
	}
	if r.Release {
		flags |= 2
	}
	if sc.Log {
		flags |= 4
	}
	if r.DryRun {
		if r.Release {
			return eval{}, fmt.Errorf("redisstore: %s on %q: Request.DryRun: a release cannot be a dry run", sc.Name, key)
		}
		flags |= 8
	}
	e := eval{name: sc.Name, lua: l, banned: sc.Ban != 0}
	if r.Backdated {
		flags |= 16
	}
	start := len(*packed)
	*packed = appendInts(slices.Grow(*packed, 9*(6+len(sc.Args))), now, r.Cost, r.MaxWait, flags, sc.Ban, sc.Limit)
	*packed = appendInts(*packed, sc.Args...)
	e.packed = (*packed)[start:len(*packed):len(*packed)]
	if r.ID != 0 {
		e.id = strconv.FormatInt(r.ID, 10)
	}
	if e.banned {
		e.state, e.ban = s.Keys(key)
	} else {
		e.state = s.stateKey(key)
	}
	return e, nil
}

// decision reads the reply {allowed, limit, remaining, reset_after, retry_after, delay, granted}
// of script name on key, and the stamp that ends a partial request's reply (see answer).
func (s *Store) decision(name, key string, cmd *redis.Cmd, unsent error) (algos.Decision, int64, error) {
	v, err := s.reply(cmd, unsent)
	return decisionOf(name, key, v, err)
}

// reply is cmd's reply, or its error: the pipeline's when cmd was not sent at all.
func (s *Store) reply(cmd *redis.Cmd, unsent error) (any, error) {
	if cmd.Err() == nil && cmd.Val() == nil && unsent != nil {
		return nil, fmt.Errorf("not sent: %w", s.dials.explain(unsent))
	}
	return cmd.Val(), s.dials.explain(cmd.Err())
}

// decisionOf reads one decision's reply, v, or its error.
func decisionOf(name, key string, v any, err error) (algos.Decision, int64, error) {
	if err != nil {
		return algos.Decision{}, 0, fmt.Errorf("redisstore: %s on %q: %w", name, key, err)
	}
	vs, _ := v.([]any)
	var res [8]int64
	for i, x := range vs {
		n, ok := x.(int64)
		if !ok || i == len(res) {
			return algos.Decision{}, 0, fmt.Errorf("redisstore: %s on %q: reply %v: want 7 or 8 integers", name, key, v)
		}
		res[i] = n
	}
	return decisionFrom(name, key, &res, len(vs))
}

// decisionFrom reads a decision's reply, its n integers {allowed, limit, remaining, reset_after,
// retry_after, delay, granted} and the stamp that ends a partial request's (see answer).
func decisionFrom(name, key string, res *[8]int64, n int) (algos.Decision, int64, error) {
	if n != 7 && n != 8 {
		return algos.Decision{}, 0, fmt.Errorf("redisstore: %s on %q: reply %v: want 7 or 8 integers", name, key, res[:n])
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

// answerBatch answers ops, the decisions of one batch script call of script name, from its reply
// (see scripts.Batch and unpacker).
func (s *Store) answerBatch(name string, ops []*rules.Op, cmd *redis.Cmd, unsent error) {
	v, err := s.reply(cmd, unsent)
	packed, ok := v.(string)
	u := unpacker{s: packed}
	if err == nil {
		if n, isMap := u.header(); !ok || u.err != nil || isMap || n != len(ops) {
			err = fmt.Errorf("reply %q: want the MessagePack of %d replies", v, len(ops))
		}
	}
	if err != nil {
		err = fmt.Errorf("redisstore: %s on %q and %d more: %w", name, ops[0].Key, len(ops)-1, err)
		for _, op := range ops {
			op.Err = err
		}
		return
	}
	var res [8]int64
	for _, op := range ops {
		n, failed := u.entry(&res)
		switch {
		case u.err != nil:
			op.Err = fmt.Errorf("redisstore: %s on %q: reply %q: %w", name, op.Key, packed, u.err)
		case failed != nil:
			op.Err = fmt.Errorf("redisstore: %s on %q: %w", name, op.Key, failed)
		default:
			d, at, err := decisionFrom(name, op.Key, &res, n)
			answer(op, d, at, err)
		}
	}
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
