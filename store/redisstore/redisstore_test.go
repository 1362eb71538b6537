package redisstore

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/diana-gw/diana/internal/algotest"
	"github.com/diana-gw/diana/internal/redistest"
	"github.com/diana-gw/diana/shared/algos"
)

// TestRedisClockAndTTL: without a caller clock the script reads Redis TIME, and every key it
// writes carries a TTL that matches the state's lifetime.
func TestRedisClockAndTTL(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	s := New(c, Options{})
	ctx := context.Background()
	g := must(algos.NewBan(must(algos.NewGCRA(1, 10*algos.Second, 3)), 60*algos.Second))
	for i, want := range []bool{true, true, true, false} {
		d, err := s.Decide(ctx, "ip:192.0.2.1", g, algos.Request{Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		if d.Allowed != want {
			t.Fatalf("request %d: %+v, want allowed=%v", i, d, want)
		}
	}
	stateKey, banKey := s.Keys("ip:192.0.2.1")
	st, err := s.State(ctx, "ip:192.0.2.1", g)
	if err != nil {
		t.Fatal(err)
	}
	now := redisNow(t, c)
	if ahead := st.W[0] - now; ahead < 29*algos.Second || ahead > 30*algos.Second {
		t.Fatalf("TAT is %d µs ahead of Redis TIME, want about 30 s (3 × 10 s)", ahead)
	}
	for key, want := range map[string]time.Duration{stateKey: 30 * time.Second, banKey: 60 * time.Second} {
		ttl := c.PTTL(ctx, key).Val()
		if ttl <= want-time.Second || ttl > want {
			t.Errorf("%s has TTL %v, want about %v", key, ttl, want)
		}
	}
}

func redisNow(t *testing.T, c *redis.Client) int64 {
	tm, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return tm.UnixMicro()
}

// TestScriptsReloaded: after SCRIPT FLUSH and after a restart (a fresh server without the
// scripts) decisions go on: EVALSHA falls back to EVAL on NOSCRIPT.
func TestScriptsReloaded(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	s := New(c, Options{})
	ctx := context.Background()
	g := must(algos.NewGCRA(10, algos.Second, 10))
	decide := func(stage string) {
		t.Helper()
		if _, err := s.Decide(ctx, "k", g, algos.Request{Cost: 1}); err != nil {
			t.Fatalf("%s: %v", stage, err)
		}
	}
	decide("first call")
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	decide("after SCRIPT FLUSH")
	srv.Restart()
	var err error
	for range 3 { // the pool's old connections fail once each
		if _, err = s.Decide(ctx, "k", g, algos.Request{Cost: 1}); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("after restart: %v", err)
	}
}

// TestErrorsAreNotDenials: Redis down or too slow gives an error, promptly, never a panic.
func TestErrorsAreNotDenials(t *testing.T) {
	srv := redistest.Start(t)
	s := New(srv.Client(), Options{})
	g := must(algos.NewGCRA(10, algos.Second, 10))

	srv.Pause()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	start := time.Now()
	_, err := s.Decide(ctx, "k", g, algos.Request{Cost: 1})
	cancel()
	srv.Resume()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("paused Redis: err = %v, want the context deadline", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("a 50 ms deadline took %v", took)
	}

	srv.Stop()
	if _, err := s.Decide(context.Background(), "k", g, algos.Request{Cost: 1}); err == nil {
		t.Fatal("Redis stopped: no error")
	}
}

// TestCluster: on a Redis Cluster the state and ban keys of an identity share a slot whatever
// the identity holds, braces included (a CROSSSLOT error would show otherwise).
func TestCluster(t *testing.T) {
	srv := redistest.StartCluster(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{srv.Addr}})
	defer c.Close()
	s := New(c, Options{})
	g := must(algos.NewBan(must(algos.NewGCRA(1, algos.Second, 1)), algos.Second))
	for _, key := range []string{"ip:2001:db8::1", "user:{alice}", "}{", "{", "", "path:/a/{b}/c"} {
		for i, want := range []bool{true, false} {
			d, err := s.Decide(context.Background(), key, g, algos.Request{Cost: 1})
			if err != nil {
				t.Fatalf("key %q: %v", key, err)
			}
			if d.Allowed != want {
				t.Fatalf("key %q request %d: %+v", key, i, d)
			}
		}
	}
}

// TestConcurrentExact: clients racing on one key in Redis are admitted exactly up to the limit,
// for every algorithm.
func TestConcurrentExact(t *testing.T) {
	srv := redistest.Start(t)
	s := New(srv.Client(), Options{})
	for _, l := range algotest.Exact() {
		t.Run(l.Name, func(t *testing.T) {
			admitted := algotest.Race(t, 16, 15, func(r algos.Request) (algos.Decision, error) {
				return s.Decide(context.Background(), "hot:"+l.Name, l.Alg, r)
			})
			if admitted != l.Admits {
				t.Fatalf("admitted %d of 240, want exactly %d", admitted, l.Admits)
			}
		})
	}
}

// TestKeysUnique: distinct identities never share a state or ban key, whatever they hold.
func TestKeysUnique(t *testing.T) {
	s := New(nil, Options{})
	seen := map[string]string{}
	for _, id := range []string{"", "_", "a", "a}", "a)", "a):a}", "}", ")", "}:ban", "ban", ":ban", "{a}", "a}:ban", "a):a}:ban"} {
		state, ban := s.Keys(id)
		for _, k := range []string{state, ban} {
			if other, ok := seen[k]; ok {
				t.Fatalf("identities %q and %q share key %q", other, id, k)
			}
			seen[k] = id
		}
	}
}

// TestEveryKeyHasTTL: whatever an algorithm's script writes, on Redis's own clock, expires.
func TestEveryKeyHasTTL(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	s := New(c, Options{})
	ctx := context.Background()
	for _, l := range algotest.Exact() {
		alg := must(algos.NewBan(l.Alg, algos.Minute))
		for i := range l.Admits + 1 { // the last one is denied and bans
			if _, err := s.Decide(ctx, "ttl:"+l.Name, alg, algos.Request{Cost: 1, ID: int64(i) + 1}); err != nil {
				t.Fatal(err)
			}
		}
	}
	keys, err := c.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) < 2*len(algotest.Exact()) {
		t.Fatalf("only %d keys written: %v", len(keys), keys)
	}
	for _, k := range keys {
		if ttl := c.PTTL(ctx, k).Val(); ttl <= 0 {
			t.Errorf("%s has no TTL (%v)", k, ttl)
		}
	}
}

// TestOneRoundTrip: a decision is one round trip, an EVALSHA, whatever the algorithm: the client
// sends nothing else, and Redis counts one evalsha per decision.
func TestOneRoundTrip(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	s := New(c, Options{})
	ctx := context.Background()
	for _, l := range algotest.Exact() { // load every script first: the first call of each is an EVAL
		if _, err := s.Decide(ctx, "warm:"+l.Name, l.Alg, algos.Request{Cost: 1, ID: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	sent := &sentCommands{}
	c.AddHook(sent)
	const n = 50
	for _, l := range algotest.Exact() {
		for i := range n {
			if _, err := s.Decide(ctx, "k:"+l.Name, l.Alg, algos.Request{Cost: 1, ID: int64(i) + 2}); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := n * len(algotest.Exact())
	if len(sent.names) != want || slices.ContainsFunc(sent.names, func(s string) bool { return s != "evalsha" }) {
		t.Fatalf("%d decisions sent %d round trips (%v), want one evalsha each", want, len(sent.names), slices.Compact(sent.names))
	}
	stats, err := srv.CommandStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := stats["evalsha"].Calls; got != int64(want) {
		t.Fatalf("Redis counted %d evalsha, want %d", got, want)
	}
}

// sentCommands records what a client sends, one name per round trip.
type sentCommands struct{ names []string }

func (h *sentCommands) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *sentCommands) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.names = append(h.names, cmd.Name())
		return next(ctx, cmd)
	}
}

func (h *sentCommands) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.names = append(h.names, "pipeline")
		return next(ctx, cmds)
	}
}
