// Package bench compares Diana's stores with the anchors named in the design, in the same run:
// golang.org/x/time/rate for process memory, github.com/go-redis/redis_rate on the same
// redis-server for Redis. Run with make bench; the README shows the figures.
package bench

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
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

// BenchmarkMemory compares one decision: Diana's memory store (key lookup, clock and GCRA)
// with x/time/rate's Allow on one limiter, bare and looked up by key in a sync.Map (the usual way
// to keep an x/time/rate limiter per key), and over many keys.
func BenchmarkMemory(b *testing.B) {
	b.Run("serial/diana", func(b *testing.B) {
		s, g := memstore.New(memstore.Options{}), gcra(b)
		r := algos.Request{Cost: 1}
		b.ReportAllocs()
		for b.Loop() {
			s.Decide("ip:10.0.0.1", g, r)
		}
	})
	b.Run("serial/x-time-rate", func(b *testing.B) {
		l := rate.NewLimiter(perSecond, burst)
		b.ReportAllocs()
		for b.Loop() {
			l.Allow()
		}
	})
	b.Run("serial/x-time-rate-keyed", func(b *testing.B) {
		var m sync.Map // the key lookup Diana's figure includes
		m.Store("ip:10.0.0.1", rate.NewLimiter(perSecond, burst))
		b.ReportAllocs()
		for b.Loop() {
			l, _ := m.Load("ip:10.0.0.1")
			l.(*rate.Limiter).Allow()
		}
	})
	k := keys()
	b.Run("parallel/diana", func(b *testing.B) {
		s, g := memstore.New(memstore.Options{}), gcra(b)
		r := algos.Request{Cost: 1}
		var seq atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := int(seq.Add(7919))
			for pb.Next() {
				s.Decide(k[i%nKeys], g, r)
				i++
			}
		})
	})
	b.Run("parallel/x-time-rate", func(b *testing.B) {
		var m sync.Map
		for _, key := range k {
			m.Store(key, rate.NewLimiter(perSecond, burst))
		}
		var seq atomic.Int64
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := int(seq.Add(7919))
			for pb.Next() {
				l, _ := m.Load(k[i%nKeys])
				l.(*rate.Limiter).Allow()
				i++
			}
		})
	})
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

// BenchmarkRedis compares one decision in Redis at equal parallelism on one redis-server:
// Diana's GCRA script against go-redis/redis_rate's. Besides ns/op it reports the Redis CPU per
// call (INFO commandstats, evalsha usec_per_call).
func BenchmarkRedis(b *testing.B) {
	srv := redistest.Start(b)
	c := srv.Client()
	ctx := context.Background()
	k := keys()
	run := func(b *testing.B, decide func(key string) error) {
		if err := c.ConfigResetStat(ctx).Err(); err != nil {
			b.Fatal(err)
		}
		inParallel(b, k, decide)
		stats, err := srv.CommandStats(ctx)
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(stats["evalsha"].UsecPerCall, "redis-µs/call")
	}
	b.Run("diana", func(b *testing.B) {
		s, g := redisstore.New(c, redisstore.Options{}), gcra(b)
		r := algos.Request{Cost: 1}
		run(b, func(key string) error {
			_, err := s.Decide(ctx, key, g, r)
			return err
		})
	})
	b.Run("redis_rate", func(b *testing.B) {
		l := redis_rate.NewLimiter(c)
		lim := redis_rate.Limit{Rate: perSecond, Burst: burst, Period: time.Second}
		run(b, func(key string) error {
			_, err := l.Allow(ctx, key, lim)
			return err
		})
	})
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
