// Command rediscpu measures the Redis CPU each limiter's script costs per decision, in machine
// instructions counted by valgrind's callgrind: unlike INFO commandstats' usec_per_call, the count
// does not move with what else the machine is doing, so two scripts compare exactly.
//
// It starts redis-server under callgrind on a free loopback port, and for each limiter makes
// warm-up calls, zeroes the counters, makes N decisions over 1,000 keys, and dumps the counters.
//
//	go run ./bench/rediscpu [-n 2000] [-parts] [-only REGEXP]
//
// With -parts it measures instead the parts a script is made of (a bare EVALSHA, its reply, TIME,
// GET, SET, ...), one small script each, and the token bucket's script stopped after each of its
// steps, to tell where a script's instructions go.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	ulule "github.com/ulule/limiter/v3"
	ululeredis "github.com/ulule/limiter/v3/drivers/store/redis"

	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/algos/scripts"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/redisstore"
)

func main() {
	n := flag.Int("n", 2000, "decisions per limiter")
	parts := flag.Bool("parts", false, "measure the parts of a script instead of the limiters")
	only := flag.String("only", "", "measure only the limiters whose names match this regular expression")
	flag.Parse()
	if err := run(*n, *parts, regexp.MustCompile(*only)); err != nil {
		fmt.Fprintln(os.Stderr, "rediscpu:", err)
		os.Exit(1)
	}
}

// limiter is one decision function under test: decide makes one decision per key, all in one
// call; run gives it per keys at a time.
type limiter struct {
	name   string
	per    int
	decide func(ctx context.Context, keys []string) error
}

// single is a limiter of one decision per call.
func single(name string, decide func(ctx context.Context, key string) error) limiter {
	return limiter{name, 1, func(ctx context.Context, keys []string) error { return decide(ctx, keys[0]) }}
}

// run makes a decision on each key, per at a time.
func (l limiter) run(ctx context.Context, keys []string) error {
	for len(keys) > 0 {
		n := min(l.per, len(keys))
		if err := l.decide(ctx, keys[:n]); err != nil {
			return fmt.Errorf("%s: %w", l.name, err)
		}
		keys = keys[n:]
	}
	return nil
}

func run(n int, parts bool, only *regexp.Regexp) error {
	for _, tool := range []string{"valgrind", "callgrind_control", "redis-server"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s is needed (Debian packages valgrind, redis-server): %w", tool, err)
		}
	}
	dir, err := os.MkdirTemp("", "rediscpu")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	addr := l.Addr().String()
	l.Close()
	_, port, _ := net.SplitHostPort(addr)
	srv := exec.Command("valgrind", "--tool=callgrind", "--callgrind-out-file="+filepath.Join(dir, "cg.%p"),
		"redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	if err := srv.Start(); err != nil {
		return err
	}
	defer func() { srv.Process.Kill(); srv.Wait() }()
	pid := strconv.Itoa(srv.Process.Pid)

	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if conn, err := net.Dial("tcp", addr); err == nil {
			conn.Close()
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server under callgrind did not listen within 60 s")
		}
	}
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: 10 * time.Second})
	defer c.Close()

	fmt.Printf("Redis CPU per decision, machine instructions (callgrind), %d decisions over 1,000 keys\n\n", n)
	fmt.Printf("| limiter | instructions/decision |\n| --- | ---: |\n")
	list := limiters(c)
	if parts {
		list = scriptParts(c)
	}
	for _, lim := range list {
		if !only.MatchString(lim.name) {
			continue
		}
		warm := make([]string, 96)
		for i := range warm {
			warm[i] = "warm" + strconv.Itoa(i)
		}
		if err := lim.run(ctx, warm); err != nil {
			return err
		}
		if err := exec.Command("callgrind_control", "-z", pid).Run(); err != nil {
			return fmt.Errorf("callgrind_control -z: %w", err)
		}
		keys := make([]string, n)
		for i := range keys {
			keys[i] = "k" + strconv.Itoa(i%1000)
		}
		if err := lim.run(ctx, keys); err != nil {
			return err
		}
		ir, err := dump(dir, pid)
		if err != nil {
			return err
		}
		fmt.Printf("| %s | %.0f |\n", lim.name, float64(ir)/float64(n))
	}
	return nil
}

// limiters are the anchor and Diana's algorithms, each with a limit that admits most decisions.
func limiters(c *redis.Client) []limiter {
	rr := redis_rate.NewLimiter(c)
	rrLimit := redis_rate.Limit{Rate: 1_000_000, Burst: 1000, Period: time.Second}
	ul, err := ululeredis.NewStoreWithOptions(c, ulule.StoreOptions{Prefix: "ulule"})
	if err != nil {
		panic(err)
	}
	ululeLimiter := ulule.New(ul, ulule.Rate{Period: time.Second, Limit: 1_000_000})
	// INCRBY and EXPIRE of each key, in one pipeline.
	incrExpire := func(prefix string) func(ctx context.Context, keys []string) error {
		return func(ctx context.Context, keys []string) error {
			p := c.Pipeline()
			for _, key := range keys {
				k := prefix + key + ":" + strconv.FormatInt(time.Now().Unix(), 10)
				p.IncrBy(ctx, k, 1)
				p.Expire(ctx, k, time.Second)
			}
			_, err := p.Exec(ctx)
			return err
		}
	}
	out := []limiter{
		single("go-redis/redis_rate v10 (GCRA)", func(ctx context.Context, key string) error {
			_, err := rr.Allow(ctx, "rr:"+key, rrLimit)
			return err
		}),
		single("ulule/limiter v3 (fixed window)", func(ctx context.Context, key string) error {
			_, err := ululeLimiter.Get(ctx, key)
			return err
		}),
		{"INCRBY + EXPIRE, pipelined (envoyproxy/ratelimit's fixed window)", 1, incrExpire("ie:")},
		{"INCRBY + EXPIRE, 16 decisions per pipeline", 16, incrExpire("ie16:")},
	}
	s := redisstore.New(c, redisstore.Options{})
	for _, a := range []struct {
		name string
		alg  algos.Algorithm
	}{
		{"Diana GCRA", must(algos.NewGCRA(1_000_000, algos.Second, 1000))},
		{"Diana GCRA + ban", must(algos.NewBan(must(algos.NewGCRA(1_000_000, algos.Second, 1000)), algos.Second))},
		{"Diana fixed window", must(algos.NewFixedWindow(1_000_000, algos.Second))},
		{"Diana counter (the RLS's rate_limit)", must(algos.NewCounter(algos.Second))},
		{"Diana sliding window", must(algos.NewSlidingWindow(1_000_000, algos.Second))},
		{"Diana sliding log", must(algos.NewSlidingLog(algos.MaxLogLimit, algos.Second))},
		{"Diana leaky bucket", must(algos.NewLeakyBucket(1_000_000, algos.Second, 1000, algos.NoDelay))},
		{"Diana warm-up", must(algos.NewWarmUp(1_000_000, algos.Second, algos.Second))},
		{"Diana concurrency (take)", must(algos.NewConcurrency(algos.MaxConcurrency, algos.Second))},
	} {
		var id int64 // lease ids for the concurrency limit; 0 (none) for the others
		out = append(out, single(a.name, func(ctx context.Context, key string) error {
			if a.alg.Script().Log {
				id++
			}
			_, err := s.DecideOne(ctx, a.name+":"+key, a.alg, algos.Request{Cost: 1, ID: id})
			return err
		}))
	}
	// A request under three rules, decided together in one call (rules.Together): per client a
	// token bucket, per path a sliding window, one global fixed window (BenchmarkMultiRule's).
	three := []algos.Algorithm{must(algos.NewGCRA(1_000_000, algos.Second, 1000)),
		must(algos.NewSlidingWindow(1_000_000_000, algos.Minute)), must(algos.NewFixedWindow(1_000_000_000, algos.Second))}
	out = append(out, single("Diana, a request of three rules decided together (per request)", func(ctx context.Context, key string) error {
		calls := [3]rules.Op{{Key: "ip:" + key, Alg: three[0], Req: algos.Request{Cost: 1}},
			{Key: "path:" + key[len(key)-1:], Alg: three[1], Req: algos.Request{Cost: 1}},
			{Key: "global", Alg: three[2], Req: algos.Request{Cost: 1}}}
		s.DecideTogether(ctx, []*rules.Op{&calls[0], &calls[1], &calls[2]}, false)
		for _, c := range calls {
			if c.Err != nil {
				return c.Err
			}
		}
		return nil
	}))
	for _, a := range []struct {
		name string
		alg  algos.Algorithm
	}{
		{"Diana fixed window", must(algos.NewFixedWindow(1_000_000, algos.Second))},
		{"Diana counter (the RLS's rate_limit)", must(algos.NewCounter(algos.Second))},
	} {
		out = append(out, limiter{a.name + ", 16 decisions per call", 16, func(ctx context.Context, keys []string) error {
			calls := make([]rules.Op, len(keys))
			ops := make([]*rules.Op, len(keys))
			for i, k := range keys {
				calls[i] = rules.Op{Key: a.name + "16:" + k, Alg: a.alg, Req: algos.Request{Cost: 1}}
				ops[i] = &calls[i]
			}
			s.Decide(ctx, ops)
			for _, c := range calls {
				if c.Err != nil {
					return c.Err
				}
			}
			return nil
		}})
	}
	return out
}

// scriptParts are small scripts, each adding one part of what Diana's scripts do to the one
// before or to a bare call, and two plain commands for comparison. Each key is its own.
func scriptParts(c *redis.Client) []limiter {
	table := " return {1, 2, 3, 4, 5, 6, 7}" // the size of every Diana script's reply
	parts := []struct{ name, src string }{
		{"EVALSHA returning 1", "return 1"},
		{"EVALSHA returning a table of 7 integers", table},
		{"+ TIME", "local t = redis.call('TIME')" + table},
		{"+ TIME and two tonumber", "local t = redis.call('TIME') local now = tonumber(t[1]) * 1000000 + tonumber(t[2])" + table},
		{"+ GET", "local s = redis.call('GET', KEYS[1])" + table},
		{"+ GET and SET PX", "local s = redis.call('GET', KEYS[1]) redis.call('SET', KEYS[1], '1732204800123456 12345', 'PX', 60000)" + table},
		{"+ cmsgpack.unpack of 10 integers", "local a, b, c, d, e, f, g, h, i, j = cmsgpack.unpack(ARGV[1])" + table},
		{"+ two local functions", "local function f(x) return x end local function g(x) return f(x) end g(1)" + table},
		{"+ string.format of two integers", "local s = string.format('%d %d', 1732204800123456, 12345)" + table},
		{"+ string.match of two words", "local a, b, c, d = string.match('1732204800123456 12345', '^(%-?%d+) ?(%-?%d*) ?(%-?%d*) ?(%-?%d*)$')" + table},
		{"+ INCRBY and PEXPIRE", "redis.call('INCRBY', KEYS[1], 1) redis.call('PEXPIRE', KEYS[1], 60000)" + table},
	}
	args := []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10} // ten MessagePack integers, as Diana's scripts get
	var out []limiter
	// The token bucket's own script (GCRA: 1,000,000 a second, bursts of 1,000), whole and stopped
	// after each of its steps, each an early return of a reply of 7 integers: where a lone
	// decision's instructions go.
	tb, _ := scripts.Source("token_bucket")
	stop := func(before string) string {
		i := strings.Index(tb, before)
		if i < 0 {
			panic("token_bucket.lua: no " + before)
		}
		return tb[:i] + "  do return {1, 2, 3, 4, 5, 6, 7} end\n" + tb[i:]
	}
	// now -1 (Redis TIME), cost 1, max_wait 0, flags 0, ban 0, limit 1000, rate 10^6, period 10^6, burst 1000
	gcraArgs := []byte{0xff, 1, 0, 0, 0, 0xcd, 0x03, 0xe8, 0xce, 0x00, 0x0f, 0x42, 0x40, 0xce, 0x00, 0x0f, 0x42, 0x40, 0xcd, 0x03, 0xe8}
	for _, p := range []struct{ name, src string }{
		{"token bucket script: its functions made and its arguments unpacked", stop("  local id = ARGV[2]")},
		{"token bucket script: + Redis's clock (TIME)", stop("  local held = 0")},
		{"token bucket script: + GET of the state", stop("  local r, write, at = decide(")},
		{"token bucket script: + the decision (GCRA's arithmetic)", stop("  if write and not dry then")},
		{"token bucket script: + SET of the state with its TTL (whole)", tb},
	} {
		sc := redis.NewScript(p.src)
		out = append(out, single(p.name, func(ctx context.Context, key string) error {
			return sc.Run(ctx, c, []string{"tb:" + key}, gcraArgs).Err()
		}))
	}
	for _, p := range parts {
		sc := redis.NewScript(p.src)
		out = append(out, single(p.name, func(ctx context.Context, key string) error {
			err := sc.Run(ctx, c, []string{p.name + ":" + key}, args).Err()
			if errors.Is(err, redis.Nil) {
				err = nil
			}
			return err
		}))
	}
	out = append(out, single("INCRBY and PEXPIRE, pipelined (no script)", func(ctx context.Context, key string) error {
		p := c.Pipeline()
		p.IncrBy(ctx, "plain:"+key, 1)
		p.PExpire(ctx, "plain:"+key, time.Minute)
		_, err := p.Exec(ctx)
		return err
	}))
	return out
}

func must(a algos.Algorithm, err error) algos.Algorithm {
	if err != nil {
		panic(err)
	}
	return a
}

// dump asks callgrind for a dump and returns the instructions counted since the last zeroing.
func dump(dir, pid string) (int64, error) {
	before, _ := filepath.Glob(filepath.Join(dir, "cg."+pid+".*"))
	if err := exec.Command("callgrind_control", "-d", pid).Run(); err != nil {
		return 0, fmt.Errorf("callgrind_control -d: %w", err)
	}
	after, _ := filepath.Glob(filepath.Join(dir, "cg."+pid+".*"))
	if len(after) != len(before)+1 {
		return 0, fmt.Errorf("callgrind wrote %d dumps, want 1", len(after)-len(before))
	}
	newest := ""
	for _, f := range after {
		if !contains(before, f) {
			newest = f
		}
	}
	f, err := os.Open(newest)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "summary: "); ok {
			return strconv.ParseInt(strings.Fields(v)[0], 10, 64)
		}
	}
	return 0, fmt.Errorf("no summary line in %s", newest)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
