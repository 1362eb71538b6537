// Package bench compares Diana's stores with the anchors named in the design, in the same run:
// golang.org/x/time/rate for process memory, github.com/go-redis/redis_rate on the same
// redis-server for Redis. Run with make bench; the README shows the figures.
package bench

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/sethvargo/go-limiter/memorystore"
	"github.com/throttled/throttled/v2"
	throttledredis "github.com/throttled/throttled/v2/store/goredisstore.v9"
	throttledmem "github.com/throttled/throttled/v2/store/memstore"
	ulule "github.com/ulule/limiter/v3"
	ululemem "github.com/ulule/limiter/v3/drivers/store/memory"
	ululeredis "github.com/ulule/limiter/v3/drivers/store/redis"
	"golang.org/x/time/rate"

	"github.com/diana-gw/diana/internal/redistest"
	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/batch"
	"github.com/diana-gw/diana/store/memstore"
	"github.com/diana-gw/diana/store/redisstore"
)

// The same limit everywhere: 1,000,000 per second, a bucket of 1,000.
const (
	perSecond = 1_000_000
	burst     = 1_000
	nKeys     = 10_000
)

func keys() []string {
	k := make([]string, nKeys)
	for i := range k {
		k[i] = "ip:10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256)
	}
	return k
}

func gcra(b *testing.B) algos.Algorithm {
	g, err := algos.NewGCRA(perSecond, algos.Second, burst)
	if err != nil {
		b.Fatal(err)
	}
	return g
}

// memLimiters are the per-key limiters BenchmarkMemory compares, Diana's first: each returns the
// decision of one request for key under the same limit (1,000,000 per second, bursts of 1,000).
var memLimiters = []struct {
	name string
	new  func(b *testing.B, keys []string) func(key string) bool
}{
	{"diana", func(b *testing.B, _ []string) func(string) bool {
		// Bounded as the others are (the default bound is smaller).
		s, g := memstore.New(memstore.Options{MaxEntries: 1_000_000}), gcra(b)
		r := algos.Request{Cost: 1}
		return func(key string) bool { return s.Decide(key, g, r).Allowed }
	}},
	{"x-time-rate", func(b *testing.B, keys []string) func(string) bool {
		var m sync.Map // the usual way to keep an x/time/rate limiter per key
		for _, key := range keys {
			m.Store(key, rate.NewLimiter(perSecond, burst))
		}
		return func(key string) bool {
			l, _ := m.Load(key)
			return l.(*rate.Limiter).Allow()
		}
	}},
	{"sethvargo", func(b *testing.B, _ []string) func(string) bool {
		s, err := memorystore.New(&memorystore.Config{Tokens: burst, Interval: time.Second * burst / perSecond})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close(context.Background()) })
		ctx := context.Background()
		return func(key string) bool {
			_, _, _, ok, _ := s.Take(ctx, key)
			return ok
		}
	}},
	{"ulule", func(b *testing.B, _ []string) func(string) bool {
		l := ulule.New(ululemem.NewStore(), ulule.Rate{Period: time.Second * burst / perSecond, Limit: burst})
		ctx := context.Background()
		return func(key string) bool {
			c, _ := l.Get(ctx, key)
			return !c.Reached
		}
	}},
	{"throttled", func(b *testing.B, _ []string) func(string) bool {
		st, err := throttledmem.NewCtx(1_000_000) // bounded like Diana's store here
		if err != nil {
			b.Fatal(err)
		}
		l, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{MaxRate: throttled.PerSec(perSecond), MaxBurst: burst - 1})
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		return func(key string) bool {
			limited, _, _ := l.RateLimitCtx(ctx, key, 1)
			return !limited
		}
	}},
}

// BenchmarkMemory compares one decision in process memory, key lookup and clock included:
// Diana's memory store (GCRA) against the per-key limiters of memLimiters, serially on one key
// and from one goroutine per CPU over 10,000 keys. b.N decisions each, in alternating rounds of
// 10,000, so that all see the same load of a shared machine. It reports each one's time per
// decision (ns/op:NAME), this process's CPU per decision (cpu-ns/op:NAME), and how many times as
// many decisions per second as each other one Diana made (x:NAME, above 1 when Diana is faster),
// and each one's heap allocations per decision (allocs/op:NAME).
func BenchmarkMemory(b *testing.B) {
	k := keys()
	for _, mode := range []struct {
		name string
		g    int
		keys []string
	}{{"serial", 1, k[:1]}, {"parallel", runtime.GOMAXPROCS(0), k}} {
		b.Run(mode.name, func(b *testing.B) {
			sides := make([]side, len(memLimiters))
			for i, l := range memLimiters {
				decide := l.new(b, mode.keys)
				sides[i] = side{name: l.name, run: func(from, n int) time.Duration {
					return concurrently(mode.g, n, func(j int) { decide(mode.keys[(from+j)*7919%len(mode.keys)]) })
				}}
			}
			inRounds(b, 100_000, sides, cpuTime)
			report(b, sides, time.Nanosecond, "ns/op:", "cpu-ns/op:")
		})
	}
}

// inParallel runs decide on 8 goroutines per CPU, each going round the keys from its own offset,
// and stops the timer.
func inParallel(b *testing.B, keys []string, decide func(key string) error) {
	var seq atomic.Int64
	b.SetParallelism(8)
	b.RunParallel(func(pb *testing.PB) {
		i := int(seq.Add(7919))
		for pb.Next() {
			if err := decide(keys[i%len(keys)]); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
	b.StopTimer()
}

// redisLimiters are the limiters BenchmarkRedis compares on one redis-server, Diana's first: each
// returns the decision of one request for key, an error if Redis could not decide it. Diana's
// GCRA, redis_rate and throttled keep the same token bucket (1,000,000 per second, bursts of
// 1,000); ulule and the INCRBY+EXPIRE pattern (envoyproxy/ratelimit's) count fixed windows,
// beside Diana's fixed window at the same limit (1,000,000 per second).
var redisLimiters = []struct {
	name string
	new  func(b *testing.B, c *redis.Client) func(ctx context.Context, key string) (bool, error)
}{
	{"diana", func(b *testing.B, c *redis.Client) func(context.Context, string) (bool, error) {
		return dianaRedis(c, gcra(b))
	}},
	{"diana-fixed-window", func(b *testing.B, c *redis.Client) func(context.Context, string) (bool, error) {
		fw, err := algos.NewFixedWindow(perSecond, algos.Second)
		if err != nil {
			b.Fatal(err)
		}
		return dianaRedis(c, fw)
	}},
	{"redis_rate", func(b *testing.B, c *redis.Client) func(context.Context, string) (bool, error) {
		l := redis_rate.NewLimiter(c)
		lim := redis_rate.Limit{Rate: perSecond, Burst: burst, Period: time.Second}
		return func(ctx context.Context, key string) (bool, error) {
			r, err := l.Allow(ctx, "rr:"+key, lim)
			return err == nil && r.Allowed > 0, err
		}
	}},
	{"ulule", func(b *testing.B, c *redis.Client) func(context.Context, string) (bool, error) {
		st, err := ululeredis.NewStoreWithOptions(c, ulule.StoreOptions{Prefix: "ulule"})
		if err != nil {
			b.Fatal(err)
		}
		l := ulule.New(st, ulule.Rate{Period: time.Second, Limit: perSecond})
		return func(ctx context.Context, key string) (bool, error) {
			r, err := l.Get(ctx, key)
			return !r.Reached, err
		}
	}},
	{"throttled", func(b *testing.B, c *redis.Client) func(context.Context, string) (bool, error) {
		st, err := throttledredis.NewCtx(c, "throttled:")
		if err != nil {
			b.Fatal(err)
		}
		l, err := throttled.NewGCRARateLimiterCtx(st, throttled.RateQuota{MaxRate: throttled.PerSec(perSecond), MaxBurst: burst - 1})
		if err != nil {
			b.Fatal(err)
		}
		return func(ctx context.Context, key string) (bool, error) {
			limited, _, err := l.RateLimitCtx(ctx, key, 1)
			return !limited, err
		}
	}},
	{"incrby-expire", func(b *testing.B, c *redis.Client) func(context.Context, string) (bool, error) {
		// envoyproxy/ratelimit's fixed window: INCRBY and EXPIRE pipelined, one round trip.
		return func(ctx context.Context, key string) (bool, error) {
			k := "ie:" + key + ":" + strconv.FormatInt(time.Now().Unix(), 10)
			p := c.Pipeline()
			n := p.IncrBy(ctx, k, 1)
			p.Expire(ctx, k, time.Second)
			_, err := p.Exec(ctx)
			return n.Val() <= perSecond, err
		}
	}},
}

// dianaRedis decides in Diana's Redis store under alg.
func dianaRedis(c *redis.Client, alg algos.Algorithm) func(context.Context, string) (bool, error) {
	s := redisstore.New(c, redisstore.Options{})
	r := algos.Request{Cost: 1}
	return func(ctx context.Context, key string) (bool, error) {
		d, err := s.DecideOne(ctx, key, alg, r)
		return d.Allowed, err
	}
}

// BenchmarkRedis compares one decision in Redis on one redis-server, from 1, 4, 16 and 64
// goroutines over 10,000 keys: Diana against the limiters of redisLimiters. b.N decisions each,
// in alternating rounds of 1,000, so that all see the same load of a shared machine. It reports
// each one's time per decision (µs/op:NAME, the inverse of its decisions per second), the Redis
// server's CPU per decision (redis-µs/op:NAME), and how many times as many decisions per second
// as each other one Diana's GCRA made (x:NAME, above 1 when Diana is faster).
func BenchmarkRedis(b *testing.B) {
	srv := redistest.Start(b)
	c := srv.Client()
	k := keys()
	ctx := context.Background()
	redisCPU := redisCPUOf(b, srv)
	for _, g := range []int{1, 4, 16, 64} {
		b.Run(fmt.Sprintf("g=%d", g), func(b *testing.B) {
			sides := make([]side, len(redisLimiters))
			for i, l := range redisLimiters {
				decide := l.new(b, c)
				sides[i] = side{name: l.name, run: func(from, n int) time.Duration {
					return concurrently(g, n, func(j int) {
						if _, err := decide(ctx, k[(from+j)*7919%len(k)]); err != nil {
							b.Error(err)
						}
					})
				}}
			}
			inRounds(b, 1000, sides, redisCPU)
			report(b, sides, time.Microsecond, "µs/op:", "redis-µs/op:")
		})
	}
}

// redisCPUOf returns the CPU time srv's redis-server has used so far, as its INFO cpu says.
func redisCPUOf(b *testing.B, srv *redistest.Server) func() time.Duration {
	return func() time.Duration {
		cpu, err := srv.CPU(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		return cpu
	}
}

// scriptCalls returns the script calls (EVALSHA and EVAL) srv's redis-server has run so far, as
// its INFO commandstats counts them.
func scriptCalls(b testing.TB, srv *redistest.Server) int64 {
	st, err := srv.CommandStats(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	return st["evalsha"].Calls + st["eval"].Calls
}

// side is one limiter of a comparison: run makes n decisions, the first numbered from, and
// returns the time they took; took and cpu add up its rounds.
type side struct {
	name      string
	run       func(from, n int) time.Duration
	took, cpu time.Duration
	allocs    uint64 // heap allocations of this process
}

// inRounds makes b.N decisions on each side, in rounds of at most round decisions that go from
// one side to the next, and adds up each side's time, allocations and the CPU time cpu counts
// meanwhile. A
// garbage collection before each side's round keeps the garbage of a side that allocates from
// being collected in the next one's time.
func inRounds(b *testing.B, round int, sides []side, cpu func() time.Duration) {
	b.ResetTimer()
	for from := 0; from < b.N; from += round {
		for i := range sides {
			var m runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&m)
			a0, c0 := m.Mallocs, cpu()
			sides[i].took += sides[i].run(from, min(round, b.N-from))
			sides[i].cpu += cpu() - c0
			runtime.ReadMemStats(&m)
			sides[i].allocs += m.Mallocs - a0
		}
	}
	b.StopTimer()
}

// report reports each side's time and CPU per decision in unit, its allocations per decision,
// and the first side's decisions per second over each other's.
func report(b *testing.B, sides []side, unit time.Duration, took, cpu string) {
	per := func(d time.Duration) float64 { return float64(d) / float64(unit) / float64(b.N) }
	for i, s := range sides {
		b.ReportMetric(per(s.took), took+s.name)
		b.ReportMetric(per(s.cpu), cpu+s.name)
		b.ReportMetric(float64(s.allocs)/float64(b.N), "allocs/op:"+s.name)
		if i > 0 {
			b.ReportMetric(float64(s.took)/float64(sides[0].took), "x:"+s.name)
		}
	}
}

// concurrently runs op(0) … op(n−1) from g goroutines, each taking its share in turn (on this
// goroutine when g is 1), and returns the time they took.
func concurrently(g, n int, op func(i int)) time.Duration {
	start := time.Now()
	if g == 1 {
		for i := range n {
			op(i)
		}
		return time.Since(start)
	}
	var wg sync.WaitGroup
	for w := range g {
		wg.Go(func() {
			for i := w * n / g; i < (w+1)*n/g; i++ {
				op(i)
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

// BenchmarkBatched compares one decision in cluster mode, one Redis call each, with batched mode
// (store/batch, batches of up to 100) and with go-redis/redis_rate, on one redis-server: 100 keys,
// each a token bucket of 100,000 per second (a leased batch lives 100 ms). It reports the Redis
// calls per decision.
func BenchmarkBatched(b *testing.B) {
	srv := redistest.Start(b)
	c := srv.Client()
	ctx := context.Background()
	const rate, nk = 100_000, 100
	k := keys()[:nk]
	g, err := algos.NewGCRA(rate, algos.Second, rate)
	if err != nil {
		b.Fatal(err)
	}
	run := func(b *testing.B, decide func(key string) error) {
		before := scriptCalls(b, srv)
		inParallel(b, k, decide)
		b.ReportMetric(float64(scriptCalls(b, srv)-before)/float64(b.N), "redis-calls/op")
	}
	b.Run("cluster", func(b *testing.B) {
		s := redisstore.New(c, redisstore.Options{Prefix: "cluster:"})
		r := algos.Request{Cost: 1}
		run(b, func(key string) error {
			_, err := s.DecideOne(ctx, key, g, r)
			return err
		})
	})
	b.Run("batched", func(b *testing.B) {
		batching, err := g.Batching(0)
		if err != nil {
			b.Fatal(err)
		}
		alg := &rules.Batched{Algorithm: g, Batching: batching, Min: 1, Max: 100}
		s := batch.New(redisstore.New(c, redisstore.Options{Prefix: "batched:"}), batch.Options{})
		run(b, func(key string) error {
			op := rules.Op{Key: key, Alg: alg, Req: algos.Request{Cost: 1}, Batch: alg}
			s.Decide(ctx, []*rules.Op{&op})
			return op.Err
		})
	})
	b.Run("redis_rate", func(b *testing.B) {
		l := redis_rate.NewLimiter(c)
		lim := redis_rate.Limit{Rate: rate, Burst: rate, Period: time.Second}
		run(b, func(key string) error {
			_, err := l.Allow(ctx, "rr:"+key, lim)
			return err
		})
	})
}
