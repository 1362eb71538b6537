// Package redisstore runs the algorithms of shared/algos in Redis, so that every gateway node
// shares one limit. State changes only inside each algorithm's Lua twin (shared/algos/scripts):
// one EVALSHA per decision (go-redis reloads the script on NOSCRIPT), time from Redis TIME, a TTL
// on every key the script writes, and the keys of one identity under one hash tag, so the same
// code runs on a standalone Redis, behind Sentinel or on a Redis Cluster.
package redisstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/algos/scripts"
)

// Options tune a Store.
type Options struct {
	// Prefix starts every key; default "diana:".
	Prefix string
	// CallerClock sends Request.Now to the scripts instead of letting them read Redis TIME.
	// Tests only: production uses Redis's clock, one for the whole cluster.
	CallerClock bool
}

// Store decides requests in Redis.
type Store struct {
	c       redis.UniversalClient
	o       Options
	scripts map[string]*redis.Script
}

// New returns a Store on c, which may be a standalone, Sentinel (failover) or Cluster client.
// For Decide to honour context deadlines, c must be made with ContextTimeoutEnabled; otherwise
// go-redis waits for its own read and write timeouts.
func New(c redis.UniversalClient, o Options) *Store {
	if o.Prefix == "" {
		o.Prefix = "diana:"
	}
	s := &Store{c: c, o: o, scripts: map[string]*redis.Script{}}
	for _, name := range scripts.Names() {
		src, _ := scripts.Source(name)
		s.scripts[name] = redis.NewScript(src)
	}
	return s
}

// Keys returns the state key and the ban key of an identity: both carry the identity as their
// hash tag, so they live in one Redis Cluster slot. A hash tag ends at the first '}' and an empty
// one hashes the whole key, so an identity that is empty or holds a '}' gets a tag with each '}'
// made ')' (or "_" if empty), followed by the identity itself to keep keys unique.
func (s *Store) Keys(key string) (state, ban string) {
	if key != "" && strings.IndexByte(key, '}') < 0 {
		state = s.o.Prefix + "{" + key + "}"
	} else {
		tag := strings.ReplaceAll(key, "}", ")")
		if tag == "" {
			tag = "_"
		}
		state = s.o.Prefix + "{" + tag + "}:" + key
	}
	return state, state + ":ban"
}

// Decide applies r to the identity key under alg, atomically in Redis. An error (Redis down,
// timeout, context done) is returned as such and is never a denial: the caller's fail policy
// decides what it means.
func (s *Store) Decide(ctx context.Context, key string, alg algos.Algorithm, r algos.Request) (algos.Decision, error) {
	r = r.Bounded()
	sc := alg.Script()
	script, ok := s.scripts[sc.Name]
	if !ok {
		return algos.Decision{}, fmt.Errorf("redisstore: algorithm %q has no Lua script", sc.Name)
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
	buf := make([]byte, 0, 9*(6+len(sc.Args)))
	buf = appendInts(buf, now, r.Cost, r.MaxWait, flags, sc.Ban, sc.Limit)
	buf = appendInts(buf, sc.Args...)
	args := []any{buf}
	if r.ID != 0 {
		args = append(args, strconv.FormatInt(r.ID, 10))
	}
	stateKey, banKey := s.Keys(key)
	keys := []string{stateKey, banKey}
	if sc.Ban == 0 {
		keys = keys[:1] // the script reads the ban key only when it bans
	}
	res, err := script.Run(ctx, s.c, keys, args...).Int64Slice()
	if err != nil {
		return algos.Decision{}, fmt.Errorf("redisstore: %s on %q: %w", sc.Name, key, err)
	}
	if len(res) != 7 {
		return algos.Decision{}, fmt.Errorf("redisstore: %s on %q: reply has %d values, want 7", sc.Name, key, len(res))
	}
	return algos.Decision{
		Allowed: res[0] == 1, Limit: res[1], Remaining: res[2],
		ResetAfter: res[3], RetryAfter: res[4], Delay: res[5], Granted: res[6],
	}, nil
}

// State reads what Redis holds for an identity, in the form the algorithm's Go twin keeps it:
// State.W from the words of a string state, State.Log from the scores of a sorted set, State.Ban
// from the ban key. For inspection and tests.
func (s *Store) State(ctx context.Context, key string, alg algos.Algorithm) (algos.State, error) {
	var st algos.State
	stateKey, banKey := s.Keys(key)
	p := s.c.Pipeline()
	ban := p.Get(ctx, banKey)
	var words *redis.StringCmd
	var log *redis.ZSliceCmd
	if alg.Script().Log {
		log = p.ZRangeWithScores(ctx, stateKey, 0, -1)
	} else {
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
	v, err := words.Result()
	if errors.Is(err, redis.Nil) {
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("redisstore: read %s: %w", stateKey, err)
	}
	for i, w := range strings.Fields(v) {
		if i >= len(st.W) {
			return st, fmt.Errorf("redisstore: %s holds %q: more than %d words", stateKey, v, len(st.W))
		}
		if st.W[i], err = strconv.ParseInt(w, 10, 64); err != nil {
			return st, fmt.Errorf("redisstore: %s holds %q: %w", stateKey, v, err)
		}
	}
	return st, nil
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
