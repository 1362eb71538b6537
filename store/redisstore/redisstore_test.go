package redisstore

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/diana-gw/diana/internal/algotest"
	"github.com/diana-gw/diana/internal/redistest"
	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/rules"
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
		d, err := s.DecideOne(ctx, "ip:192.0.2.1", g, algos.Request{Cost: 1})
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
		if _, err := s.DecideOne(ctx, "k", g, algos.Request{Cost: 1}); err != nil {
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
		if _, err = s.DecideOne(ctx, "k", g, algos.Request{Cost: 1}); err == nil {
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
	_, err := s.DecideOne(ctx, "k", g, algos.Request{Cost: 1})
	cancel()
	srv.Resume()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("paused Redis: err = %v, want the context deadline", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("a 50 ms deadline took %v", took)
	}

	srv.Stop()
	if _, err := s.DecideOne(context.Background(), "k", g, algos.Request{Cost: 1}); err == nil {
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
			d, err := s.DecideOne(context.Background(), key, g, algos.Request{Cost: 1})
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
				return s.DecideOne(context.Background(), "hot:"+l.Name, l.Alg, r)
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
			if _, err := s.DecideOne(ctx, "ttl:"+l.Name, alg, algos.Request{Cost: 1, ID: int64(i) + 1}); err != nil {
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
		if _, err := s.DecideOne(ctx, "warm:"+l.Name, l.Alg, algos.Request{Cost: 1, ID: 1}); err != nil {
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
			if _, err := s.DecideOne(ctx, "k:"+l.Name, l.Alg, algos.Request{Cost: 1, ID: int64(i) + 2}); err != nil {
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

// batchLimits are the limits the DecideAll tests use: one per algorithm, and one banned.
func batchLimits() []algotest.Limit {
	ls := algotest.Exact()
	for _, l := range algotest.Exact() {
		if l.Name == "sliding log" || l.Name == "concurrency" {
			ls = append(ls, algotest.Limit{Name: l.Name + "+ban", Alg: must(algos.NewBan(l.Alg, algos.Hour))})
		}
	}
	return ls
}

// randomBatch makes calls on every limit, on two keys each, one of them twice: unit and large
// costs, peeks and dry runs.
func randomBatch(rng *rand.Rand, now int64, id *int64) []rules.Op {
	var calls []rules.Op
	for _, l := range batchLimits() {
		for k := range 3 {
			*id++
			r := algos.Request{Now: now, Cost: 1, ID: *id, DryRun: rng.IntN(3) == 0}
			switch rng.IntN(5) {
			case 0:
				r.Cost = 0
			case 1:
				r.Cost = rng.Int64N(60)
			}
			calls = append(calls, rules.Op{Key: l.Name + ":" + strconv.Itoa(k%2), Alg: l.Alg, Req: r})
		}
	}
	return calls
}

// TestDecideAll: a batch decides as the same calls made one by one with Decide would (on a twin
// set of keys, through another client), leaves the same states, and is one round trip.
func TestDecideAll(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	batch := New(c, Options{CallerClock: true, Prefix: "batch:"})
	seq := New(srv.Client(), Options{CallerClock: true, Prefix: "seq:"})
	ctx := context.Background()
	for _, l := range batchLimits() { // load every script first: the first call of each is an EVAL
		if _, err := batch.DecideOne(ctx, "warm:"+l.Name, l.Alg, algos.Request{Cost: 1, ID: -1}); err != nil {
			t.Fatal(err)
		}
		two := []rules.Op{{Key: "warm:" + l.Name, Alg: l.Alg, Req: algos.Request{Cost: 1, ID: -2}}, {Key: "warm2:" + l.Name, Alg: l.Alg, Req: algos.Request{Cost: 1, ID: -3}}}
		if batch.decideAll(ctx, two); two[0].Err != nil || two[1].Err != nil { // and its batch script
			t.Fatal(two[0].Err, two[1].Err)
		}
	}
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	sent := &sentCommands{}
	c.AddHook(sent)
	rng := rand.New(rand.NewPCG(1, 2))
	now, id := int64(1_700_000_000_000_000), int64(0)
	const rounds = 40
	calls := 0
	for round := range rounds {
		now += rng.Int64N(2 * algos.Minute)
		b := randomBatch(rng, now, &id)
		batch.decideAll(ctx, b)
		for i, call := range b {
			want, err := seq.DecideOne(ctx, call.Key, call.Alg, call.Req)
			if err != nil || call.Err != nil {
				t.Fatalf("round %d call %d: errors %v, %v", round, i, call.Err, err)
			}
			if call.Dec != want {
				t.Fatalf("round %d call %d %s %+v:\n  batch %+v\n  one   %+v", round, i, call.Key, call.Req, call.Dec, want)
			}
		}
		calls += len(b)
	}
	if len(sent.names) != rounds || slices.ContainsFunc(sent.names, func(s string) bool { return s != "pipeline" }) {
		t.Fatalf("%d batches sent %d round trips (%v), want one pipeline each", rounds, len(sent.names), slices.Compact(sent.names))
	}
	stats, err := srv.CommandStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// One by one, an EVALSHA per call; batched, one per round trip (the mixed script), as a
	// batch holds fewer than maxBatch calls.
	if got := stats["evalsha"].Calls; got != int64(calls+rounds) || stats["eval"].Calls != 0 {
		t.Fatalf("Redis counted %d evalsha and %d eval, want %d evalsha (%d batched, %d one by one)", got, stats["eval"].Calls, calls+rounds, rounds, calls)
	}
	for _, l := range batchLimits() {
		for k := range 2 {
			key := l.Name + ":" + strconv.Itoa(k)
			got, err1 := batch.State(ctx, key, l.Alg)
			want, err2 := seq.State(ctx, key, l.Alg)
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			if !equalState(got, want) {
				t.Fatalf("%s: states differ\n  batch %+v\n  one   %+v", key, got, want)
			}
		}
	}
}

// TestDecideAllScriptsReloaded: after SCRIPT FLUSH a batch still decides each call exactly once:
// the calls that got NOSCRIPT did not run, and go again as EVAL in a second pipeline.
func TestDecideAllScriptsReloaded(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	batch := New(c, Options{CallerClock: true, Prefix: "batch:"})
	seq := New(srv.Client(), Options{CallerClock: true, Prefix: "seq:"})
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	now, id := int64(1_700_000_000_000_000), int64(0)
	if err := c.Ping(ctx).Err(); err != nil { // connect before counting
		t.Fatal(err)
	}
	sent := &sentCommands{}
	c.AddHook(sent)
	for round, flush := range []bool{false, false, true, false} {
		if flush {
			if err := c.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		sent.names = nil
		b := randomBatch(rng, now, &id)
		batch.decideAll(ctx, b)
		for i, call := range b {
			want, err := seq.DecideOne(ctx, call.Key, call.Alg, call.Req)
			if err != nil || call.Err != nil {
				t.Fatalf("round %d call %d: errors %v, %v", round, i, call.Err, err)
			}
			if call.Dec != want {
				t.Fatalf("round %d call %d %s %+v:\n  batch %+v\n  one   %+v", round, i, call.Key, call.Req, call.Dec, want)
			}
		}
		// The first round loads the scripts (their first call is an EVAL), as does the one after
		// the flush (seq's calls loaded them again only after the batch ran).
		want := 1
		if round == 0 || flush {
			want = 2
		}
		if len(sent.names) != want {
			t.Fatalf("round %d: %d round trips (%v), want %d", round, len(sent.names), sent.names, want)
		}
		now += algos.Second
	}
}

// TestDecideAllErrors: a call that cannot be sent gets its own error and the others go ahead;
// with Redis stopped every call gets an error, and nothing panics.
func TestDecideAllErrors(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	s := New(c, Options{})
	ctx := context.Background()
	conc := must(algos.NewConcurrency(2, algos.Minute))
	g := must(algos.NewGCRA(1, algos.Second, 5))
	sent := &sentCommands{}
	c.AddHook(sent)

	bad := []rules.Op{
		{Key: "a", Alg: conc, Req: algos.Request{ID: 1, Release: true, DryRun: true}},
		{Key: "b", Alg: noScript{}, Req: algos.Request{Cost: 1}},
	}
	s.decideAll(ctx, bad)
	if len(sent.names) != 0 {
		t.Fatalf("a batch of calls that cannot be sent made round trips: %v", sent.names)
	}
	for i, want := range []string{`concurrency on "a": Request.DryRun: a release cannot be a dry run`, `algorithm "nope" has no Lua script`} {
		if bad[i].Err == nil || !strings.Contains(bad[i].Err.Error(), want) {
			t.Errorf("call %d: err %v, want one saying %q", i, bad[i].Err, want)
		}
	}
	if _, err := s.DecideOne(ctx, "a", conc, bad[0].Req); err == nil || !strings.Contains(err.Error(), "Request.DryRun") {
		t.Errorf("Decide of a dry release: err %v", err)
	}

	mixed := []rules.Op{bad[0], {Key: "c", Alg: g, Req: algos.Request{Cost: 1}}, bad[1], {Key: "c", Alg: g, Req: algos.Request{Cost: 5}}}
	s.decideAll(ctx, mixed)
	if mixed[0].Err == nil || mixed[2].Err == nil {
		t.Errorf("bad calls in a mixed batch: errors %v, %v", mixed[0].Err, mixed[2].Err)
	}
	if mixed[1].Err != nil || !mixed[1].Dec.Allowed || mixed[3].Err != nil || mixed[3].Dec.Allowed || mixed[3].Dec.Remaining != 4 {
		t.Errorf("good calls in a mixed batch: %+v %v, %+v %v", mixed[1].Dec, mixed[1].Err, mixed[3].Dec, mixed[3].Err)
	}

	srv.Stop()
	calls := []rules.Op{{Key: "c", Alg: g, Req: algos.Request{Cost: 1}}, {Key: "d", Alg: conc, Req: algos.Request{Cost: 1, ID: 3}}}
	s.decideAll(ctx, calls)
	for i, call := range calls {
		if call.Err == nil || !strings.Contains(call.Err.Error(), strconv.Quote(call.Key)) || call.Dec != (algos.Decision{}) {
			t.Errorf("Redis stopped, call %d: %+v, %v; want an error naming the key and no decision", i, call.Dec, call.Err)
		}
	}
}

// TestBatchScript: a run of calls of one algorithm goes in one script call (scripts.Mixed), on
// Redis's clock; a call that fails inside it (its key holds another type) gets Redis's error and
// the calls before and after it are decided, as in a pipeline of one script call each.
func TestBatchScript(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	s := New(c, Options{})
	ctx := context.Background()
	fw := must(algos.NewFixedWindow(3, algos.Minute))
	bad, _ := s.Keys("bad")
	if err := c.HSet(ctx, bad, "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	calls := []rules.Op{
		{Key: "x", Alg: fw, Req: algos.Request{Cost: 2}},
		{Key: "bad", Alg: fw, Req: algos.Request{Cost: 1}},
		{Key: "x", Alg: fw, Req: algos.Request{Cost: 2}},
		{Key: "y", Alg: fw, Req: algos.Request{Cost: 3}},
	}
	s.decideAll(ctx, calls) // loads the batch script
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for i := range calls {
		calls[i].Key += "2"
	}
	calls[1].Key = "bad"
	s.decideAll(ctx, calls)
	if err := calls[1].Err; err == nil || !strings.Contains(err.Error(), "WRONGTYPE") || !strings.Contains(err.Error(), `"bad"`) {
		t.Errorf("the call on a hash: %v, want WRONGTYPE naming its key", err)
	}
	for i, want := range []algos.Decision{{Allowed: true, Limit: 3, Remaining: 1}, {}, {Limit: 3, Remaining: 1}, {Allowed: true, Limit: 3, Remaining: 0}} {
		got := calls[i].Dec
		if i != 1 && (calls[i].Err != nil || got.Allowed != want.Allowed || got.Remaining != want.Remaining || got.Limit != want.Limit) {
			t.Errorf("call %d: %+v, %v; want %+v", i, got, calls[i].Err, want)
		}
	}
	stats, err := srv.CommandStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if stats["evalsha"].Calls != 1 || stats["time"].Calls != 1 {
		t.Errorf("4 calls of one algorithm made %d EVALSHA and read TIME %d times, want 1 and 1", stats["evalsha"].Calls, stats["time"].Calls)
	}
}

// noScript is an algorithm without a Lua twin.
type noScript struct{}

func (noScript) Decide(*algos.State, algos.Request) algos.Decision { return algos.Decision{} }
func (noScript) Script() algos.Script                              { return algos.Script{Name: "nope"} }

// TestDecideAllCluster: on a Redis Cluster a batch may hold keys of many slots (go-redis sends
// one pipeline per node), and calls on one key are decided in order.
func TestDecideAllCluster(t *testing.T) {
	srv := redistest.StartCluster(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{srv.Addr}})
	defer c.Close()
	s := New(c, Options{})
	ctx := context.Background()
	limits := map[string]algos.Algorithm{ // a prefix per limit: keys are unique per limit
		"g:": must(algos.NewBan(must(algos.NewGCRA(1, algos.Minute, 1)), algos.Minute)),
		"l:": must(algos.NewSlidingLog(1, algos.Minute)),
	}
	keys := []string{"ip:2001:db8::1", "user:{alice}", "}{", "", "path:/a/{b}/c", "ip:192.0.2.7"}
	slots := map[int64]bool{}
	var calls []rules.Op
	for _, key := range keys {
		for prefix, alg := range limits {
			stateKey, _ := s.Keys(prefix + key)
			slot, err := c.ClusterKeySlot(ctx, stateKey).Result()
			if err != nil {
				t.Fatal(err)
			}
			slots[slot] = true
			calls = append(calls,
				rules.Op{Key: prefix + key, Alg: alg, Req: algos.Request{Cost: 1, DryRun: true}},
				rules.Op{Key: prefix + key, Alg: alg, Req: algos.Request{Cost: 1}},
				rules.Op{Key: prefix + key, Alg: alg, Req: algos.Request{Cost: 1}})
		}
	}
	if len(slots) < 8 {
		t.Fatalf("the keys fall in only %d slots", len(slots))
	}
	for round := range 2 { // the first round loads the scripts
		s.decideAll(ctx, calls)
		for i, call := range calls {
			want := round == 0 && i%3 != 2 // a dry run, then one admitted, one denied
			if call.Err != nil || call.Dec.Allowed != want {
				t.Fatalf("round %d call %d on %q: %+v, %v; want allowed=%v", round, i, call.Key, call.Dec, call.Err, want)
			}
		}
	}
}

// The scripts keep a state as long as its algorithm needs it, bans included: a window outlives
// the ban it caused, and a banned client is told the real wait.
func TestMatchesTransition(t *testing.T) {
	srv := redistest.Start(t)
	s := New(srv.Client(), Options{CallerClock: true})
	decide := func(key string, alg algos.Algorithm, r algos.Request) algos.Decision {
		d, err := s.DecideOne(context.Background(), key, alg, r)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	algotest.BanKeepsWindow(t, decide)
	algotest.MatchTransition(t, decide, true)
}

// A wrong password or a missing one is reported as Redis says it (WRONGPASS, NOAUTH), by
// Decide and by DecideAll, whose pipeline Redis never ran (wave 1 said "unexpected type=<nil>
// for Slice"). Redis refuses a command of more than 10 words from a client that has not
// authenticated with a protocol error that says so, before it could say NOAUTH: a batch of
// decisions is such a command.
func TestAuthErrors(t *testing.T) {
	ctx := context.Background()
	srv := redistest.StartWith(t, redistest.Options{Users: []string{"diana on >secret ~diana:* +@all"}})
	alg, err := algos.NewFixedWindow(5, algos.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ user, pass, want string }{
		{"diana", "wrong", "WRONGPASS"},
		{"", "", "NOAUTH"},
	} {
		cl, err := Open(Conn{Addrs: []string{srv.Addr}, Username: c.user, Password: c.pass})
		if err != nil {
			t.Fatal(err)
		}
		s := New(cl, Options{Prefix: "diana:"})
		_, err = s.DecideOne(ctx, "k", alg, algos.Request{Cost: 1})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Decide as %q: %v, want %s", c.user, err, c.want)
		}
		calls := []rules.Op{{Key: "a", Alg: alg, Req: algos.Request{Cost: 1}}, {Key: "b", Alg: alg, Req: algos.Request{Cost: 1}}}
		s.decideAll(ctx, calls)
		for i, call := range calls {
			if call.Err == nil || !strings.Contains(call.Err.Error(), c.want) && !(c.want == "NOAUTH" && strings.Contains(call.Err.Error(), "unauthenticated")) {
				t.Errorf("DecideAll as %q, call %d: %v, want %s", c.user, i, call.Err, c.want)
			}
		}
		cl.Close()
	}
}
