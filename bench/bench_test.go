// Package bench compares Diana's stores with the anchors named in the design, in the same run:
// golang.org/x/time/rate for process memory, github.com/go-redis/redis_rate on the same
// redis-server for Redis. Run with make bench; the README shows the figures.
package bench

import (
	"context"
	"fmt"
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
		s, g := memstore.New(memstore.Options{}), gcra(b)
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
		st, err := throttledmem.NewCtx(1_000_000) // bounded like Diana's store
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

// reportCPU reports the process's CPU time per operation since cpu: unlike ns/op, it does not
// count the time the benchmark waited for a core that other processes held.
func reportCPU(b *testing.B, cpu time.Duration) {
	b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
}

// BenchmarkMemory compares one decision in process memory, key lookup and clock included:
// Diana's memory store (GCRA) against the per-key limiters of memLimiters, serially on one key
// and in parallel over 10,000 keys. The anchor x/time/rate is also measured bare (one limiter, no
// lookup). Each also reports the CPU time per decision, which moves less with the machine's load.
func BenchmarkMemory(b *testing.B) {
	b.Run("serial/impl=x-time-rate-bare", func(b *testing.B) {
		l := rate.NewLimiter(perSecond, burst)
		b.ReportAllocs()
		for b.Loop() {
			l.Allow()
		}
	})
	k := keys()
	for _, l := range memLimiters {
		b.Run("serial/impl="+l.name, func(b *testing.B) {
			decide := l.new(b, k[:1])
			b.ReportAllocs()
			cpu := cpuTime()
			for b.Loop() {
				decide(k[0])
			}
			reportCPU(b, cpu)
		})
	}
	for _, l := range memLimiters {
		b.Run("parallel/impl="+l.name, func(b *testing.B) {
			decide := l.new(b, k)
			var seq atomic.Int64
			b.ReportAllocs()
			b.ResetTimer()
			cpu := cpuTime()
			b.RunParallel(func(pb *testing.PB) {
				i := int(seq.Add(7919))
				for pb.Next() {
					decide(k[i%nKeys])
					i++
				}
			})
			reportCPU(b, cpu)
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
		d, err := s.Decide(ctx, key, alg, r)
		return d.Allowed, err
	}
}

// BenchmarkRedis compares one decision in Redis on one redis-server, from 1, 16 and 64
// goroutines over 10,000 keys: Diana against the limiters of redisLimiters. ns/op is the
// inverse of the decisions per second; it also reports the Redis server's CPU and this
// process's CPU per decision.
func BenchmarkRedis(b *testing.B) {
	srv := redistest.Start(b)
	c := srv.Client()
	k := keys()
	for _, g := range []int{1, 16, 64} {
		for _, l := range redisLimiters {
			b.Run(fmt.Sprintf("g=%d/impl=%s", g, l.name), func(b *testing.B) {
				decide := l.new(b, c)
				concurrently(b, srv, g, k, decide)
			})
		}
	}
}

// concurrently makes b.N decisions from g goroutines, each going round the keys from its own
// offset, and reports the CPU per decision of the redis-server and of this process.
func concurrently(b *testing.B, srv *redistest.Server, g int, keys []string, decide func(context.Context, string) (bool, error)) {
	ctx := context.Background()
	redisCPU := func() time.Duration {
		cpu, err := srv.CPU(ctx)
		if err != nil {
			b.Fatal(err)
		}
		return cpu
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	rcpu := redisCPU()
	b.ResetTimer()
	cpu := cpuTime()
	for w := range g {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
				if _, err := decide(ctx, keys[(int(i)+w*7919)%len(keys)]); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-cpu)/float64(time.Microsecond)/float64(b.N), "cpu-µs/op")
	b.ReportMetric(float64(redisCPU()-rcpu)/float64(time.Microsecond)/float64(b.N), "redis-cpu-µs/op")
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
		before, err := srv.CommandStats(ctx)
		if err != nil {
			b.Fatal(err)
		}
		inParallel(b, k, decide)
		after, err := srv.CommandStats(ctx)
		if err != nil {
			b.Fatal(err)
		}
		calls := after["evalsha"].Calls - before["evalsha"].Calls + after["eval"].Calls - before["eval"].Calls
		b.ReportMetric(float64(calls)/float64(b.N), "redis-calls/op")
	}
	b.Run("cluster", func(b *testing.B) {
		s := redisstore.New(c, redisstore.Options{Prefix: "cluster:"})
		r := algos.Request{Cost: 1}
		run(b, func(key string) error {
			_, err := s.Decide(ctx, key, g, r)
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
			calls := [1]redisstore.Call{{Key: key, Alg: alg, Req: algos.Request{Cost: 1}}}
			s.DecideAll(ctx, calls[:])
			return calls[0].Err
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
