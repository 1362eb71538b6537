package bench

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"

	"github.com/diana-gw/diana/internal/redistest"
	"github.com/diana-gw/diana/shared/conf"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/memstore"
	"github.com/diana-gw/diana/store/redisstore"
	"github.com/diana-gw/diana/store/stack"
)

// The three rules of a multi-rule request, the usual production config: per client address a
// token bucket, per path a sliding window, and one global fixed window, in cluster mode, with
// limits far above the load so that every request does the same work (its units taken from
// each rule). multiPaths is the paths the requests go to.
const (
	multiRules = `{"rules": [
	{"name": "ip", "by": ["ip"], "mode": "cluster", "limit": {"algorithm": "token_bucket", "rate": 1000000000, "period": "1h"}},
	{"name": "path", "by": ["path"], "mode": "cluster", "limit": {"algorithm": "sliding_window", "limit": 1000000000, "window": "1m"}},
	{"name": "global", "mode": "cluster", "limit": {"algorithm": "fixed_window", "limit": 1000000000000, "window": "1s"}}
]}`
	oneRule = `{"rules": [
	{"name": "ip", "by": ["ip"], "mode": "cluster", "limit": {"algorithm": "token_bucket", "rate": 1000000000, "period": "1h"}}
]}`
	multiPaths = 8
)

// multiEngine is an engine of the rules of doc on a cluster store stack over c's Redis, the one
// dianad and the Kong plugin build.
func multiEngine(b *testing.B, addr, doc string) *rules.Engine {
	st, err := stack.New(stack.Redis{Conn: redisstore.Conn{Addrs: []string{addr}}, Timeout: 5 * time.Second}, stack.Hooks{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Client.Close() })
	v, err := conf.ParseJSON([]byte(doc))
	if err != nil {
		b.Fatal(err)
	}
	errs := &conf.Errors{}
	o := conf.Read(v, errs)
	rs := rules.Decode(o)
	o.Done()
	if err := errs.Err(); err != nil {
		b.Fatal(err)
	}
	e, err := rules.New(rs, rules.Options{Local: rules.Each(memstore.New(memstore.Options{}).Decide), Cluster: st.Store})
	if err != nil {
		b.Fatal(err)
	}
	return e
}

// multiLimiters are the sides of BenchmarkMultiRule: one request under three limits each, but
// "diana-1", under the first alone (the one-rule request whose Redis CPU the three rules' is
// compared with).
var multiLimiters = []struct {
	name string
	new  func(b *testing.B, srv *redistest.Server) func(ctx context.Context, ip, path string) error
}{
	{"diana", func(b *testing.B, srv *redistest.Server) func(context.Context, string, string) error {
		return checkOn(multiEngine(b, srv.Addr, multiRules))
	}},
	{"diana-1", func(b *testing.B, srv *redistest.Server) func(context.Context, string, string) error {
		return checkOn(multiEngine(b, srv.Addr, oneRule))
	}},
	{"redis_rate", func(b *testing.B, srv *redistest.Server) func(context.Context, string, string) error {
		// redis_rate counts only token buckets (GCRA): three of them, one call each, as a
		// service using it for three limits calls it.
		l := redis_rate.NewLimiter(srv.Client())
		ipLim := redis_rate.Limit{Rate: 1_000_000_000, Burst: 1_000_000_000, Period: time.Hour}
		pathLim := redis_rate.Limit{Rate: 1_000_000_000, Burst: 1_000_000_000, Period: time.Minute}
		globalLim := redis_rate.Limit{Rate: 1_000_000_000, Burst: 1_000_000_000, Period: time.Second}
		return func(ctx context.Context, ip, path string) error {
			for _, c := range []struct {
				key string
				lim redis_rate.Limit
			}{{"rr:ip:" + ip, ipLim}, {"rr:path:" + path, pathLim}, {"rr:global", globalLim}} {
				r, err := l.Allow(ctx, c.key, c.lim)
				if err != nil {
					return err
				}
				if r.Allowed == 0 {
					return fmt.Errorf("redis_rate refused %s", c.key)
				}
			}
			return nil
		}
	}},
}

// checkOn decides requests with e, each of which must be admitted.
func checkOn(e *rules.Engine) func(context.Context, string, string) error {
	return func(ctx context.Context, ip, path string) error {
		res := e.Check(ctx, &rules.Input{Method: "GET", Path: path, ClientIP: ip})
		switch {
		case res.Err != nil:
			return res.Err
		case !res.Allowed:
			return fmt.Errorf("refused by %s: %+v", res.Rule.Name, res.Decision)
		}
		return nil
	}
}

// BenchmarkMultiRule compares one request that three rules match (multiRules: per client a token
// bucket, per path a sliding window, a global fixed window, in cluster mode) on one redis-server,
// from 1, 16 and 64 goroutines over 10,000 client addresses and 8 paths: Diana's engine on the
// cluster store stack (rules.Engine.Check: the three decided together, all or nothing), the same
// engine with the first rule alone (diana-1), and go-redis/redis_rate called three times. b.N
// requests each, in alternating rounds of 1,000. It reports each one's time per request
// (µs/op:NAME), the Redis server's CPU per request (redis-µs/op:NAME) and script calls per
// request (redis-calls/op:NAME, INFO commandstats' EVALSHA and EVAL), how many times as many
// requests per second Diana made as redis_rate (x:redis_rate), and Diana's Redis CPU per request
// over the one-rule request's (redis-cpu/one-rule).
func BenchmarkMultiRule(b *testing.B) {
	srv := redistest.Start(b)
	k := keys()
	ctx := context.Background()
	paths := make([]string, multiPaths)
	for i := range paths {
		paths[i] = "/api/items/" + strconv.Itoa(i)
	}
	for _, g := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("g=%d", g), func(b *testing.B) {
			sides := make([]side, len(multiLimiters))
			calls := make([]int64, len(multiLimiters))
			for i, l := range multiLimiters {
				decide := l.new(b, srv)
				if err := decide(ctx, "192.0.2.1", paths[0]); err != nil { // connects, loads the scripts
					b.Fatal(err)
				}
				sides[i] = side{name: l.name, run: func(from, n int) time.Duration {
					c0 := scriptCalls(b, srv)
					took := concurrently(g, n, func(j int) {
						x := (from + j) * 7919
						if err := decide(ctx, k[x%len(k)], paths[x%multiPaths]); err != nil {
							b.Error(err)
						}
					})
					calls[i] += scriptCalls(b, srv) - c0
					return took
				}}
			}
			inRounds(b, 1000, sides, redisCPUOf(b, srv))
			report(b, sides, time.Microsecond, "µs/op:", "redis-µs/op:")
			for i, s := range sides {
				b.ReportMetric(float64(calls[i])/float64(b.N), "redis-calls/op:"+s.name)
			}
			if sides[1].cpu > 0 {
				b.ReportMetric(float64(sides[0].cpu)/float64(sides[1].cpu), "redis-cpu/one-rule")
			}
		})
	}
}
