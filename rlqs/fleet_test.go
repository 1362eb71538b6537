package rlqs

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/diana-gw/diana/internal/redistest"
)

// The Go transition and fleet.lua give the same answers and leave the same state, on random
// traces of reports, departures and expiries, against a real redis-server (explicit times).
func TestFleetTwin(t *testing.T) {
	rs := redistest.Start(t)
	c := rs.Client()
	ctx := context.Background()
	rnd := rand.New(rand.NewPCG(1, 2))
	for trace := range 20 {
		var now time.Time = time.Unix(1_800_000_000, 0)
		clock := func() time.Time { return now }
		r := NewRedis(c, "twin"+strconv.Itoa(trace)+":", clock)
		g := map[string]entry{}
		const max = 5
		for step := range 200 {
			now = now.Add(time.Duration(rnd.IntN(3000)) * time.Millisecond)
			inst := "i" + strconv.Itoa(rnd.IntN(8))
			demand := int64(rnd.IntN(1_000_000_000))
			switch rnd.IntN(6) {
			case 0:
				demand = Leave
			case 1:
				demand = Unknown
			case 2:
				demand = 0
			}
			ttl := time.Duration(1+rnd.IntN(5)) * time.Second
			sum, known, unknown, full := merge(g, now.UnixMicro(), inst, demand, ttl.Microseconds(), max)
			rep := &Report{Group: "b", Instance: inst, Demand: demand, TTL: ttl}
			if err := r.mergeMax(ctx, []*Report{rep}, max); err != nil {
				t.Fatal(err)
			}
			if rep.Sum != sum || rep.Known != known || rep.Unknown != unknown || rep.Full != full {
				t.Fatalf("trace %d step %d: Lua %d %d %d %v, Go %d %d %d %v", trace, step, rep.Sum, rep.Known, rep.Unknown, rep.Full, sum, known, unknown, full)
			}
			got, err := c.HGetAll(ctx, r.Key("b")).Result()
			if err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprint(state(g)); fmt.Sprint(got) != want {
				t.Fatalf("trace %d step %d: Redis holds %v, Go %s", trace, step, got, want)
			}
			checkIndex(t, c, r, "b", g)
		}
	}
}

// checkIndex fails unless the script's sorted set of expiries and its totals are those of g.
func checkIndex(t *testing.T, c *redis.Client, r *Redis, group string, g map[string]entry) {
	t.Helper()
	ctx := context.Background()
	keys := r.keys(group)
	zs, err := c.ZRangeWithScores(ctx, keys[1], 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	exp := map[string]int64{}
	for _, z := range zs {
		exp[z.Member.(string)] = int64(z.Score)
	}
	var sum, known, unknown int64
	want := map[string]int64{}
	for k, e := range g {
		want[k] = e.expires
		if e.demand < 0 {
			unknown++
		} else {
			sum, known = sum+e.demand, known+1
		}
	}
	if fmt.Sprint(exp) != fmt.Sprint(want) {
		t.Fatalf("expiries in Redis %v, want %v", exp, want)
	}
	totals, err := c.HGetAll(ctx, keys[2]).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(g) == 0 {
		if len(totals) != 0 {
			t.Fatalf("totals %v of an empty bucket", totals)
		}
		return
	}
	if got, want := fmt.Sprint(totals), fmt.Sprint(map[string]string{"sum": strconv.FormatInt(sum, 10), "known": strconv.FormatInt(known, 10), "unknown": strconv.FormatInt(unknown, 10)}); got != want {
		t.Fatalf("totals in Redis %s, want %s", got, want)
	}
}

// A bucket's hash written without its expiries and totals (by the script's earlier version,
// which read every instance on each report) is indexed at its next report, and answered as
// though the script had written it.
func TestFleetIndexRebuilt(t *testing.T) {
	rs := redistest.Start(t)
	c := rs.Client()
	ctx := context.Background()
	now := time.Unix(1_800_000_000, 0)
	r := NewRedis(c, "old:", func() time.Time { return now })
	us := now.UnixMicro()
	g := map[string]entry{"a": {4000, us + 5e6}, "b": {-1, us + 5e6}, "c": {9000, us - 1}} // c has expired
	for k, e := range g {
		if err := c.HSet(ctx, r.Key("x"), k, strconv.FormatInt(e.demand, 10)+" "+strconv.FormatInt(e.expires, 10)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	sum, known, unknown, full := merge(g, us, "d", 1000, 5e6, MaxInstances)
	rep := &Report{Group: "x", Instance: "d", Demand: 1000, TTL: 5 * time.Second}
	if err := r.Merge(ctx, []*Report{rep}); err != nil {
		t.Fatal(err)
	}
	if rep.Sum != sum || rep.Known != known || rep.Unknown != unknown || rep.Full != full || sum != 5000 || known != 2 || unknown != 1 {
		t.Fatalf("Lua %+v, Go %d %d %d %v", rep, sum, known, unknown, full)
	}
	checkIndex(t, c, r, "x", g)
}

func state(g map[string]entry) map[string]string {
	m := map[string]string{}
	for k, e := range g {
		m[k] = strconv.FormatInt(e.demand, 10) + " " + strconv.FormatInt(e.expires, 10)
	}
	return m
}

// The fleet's key lives as long as its last instance, on Redis's clock.
func TestFleetExpiry(t *testing.T) {
	rs := redistest.Start(t)
	c := rs.Client()
	ctx := context.Background()
	r := NewRedis(c, "exp:", nil)
	if err := r.Merge(ctx, []*Report{{Group: "b", Instance: "a", Demand: 5000, TTL: 2 * time.Second}}); err != nil {
		t.Fatal(err)
	}
	ttl, err := c.PTTL(ctx, r.Key("b")).Result()
	if err != nil || ttl <= time.Second || ttl > 2*time.Second {
		t.Fatalf("PTTL %v %v, want the instance's 2s", ttl, err)
	}
	if !strings.HasPrefix(r.Key("b"), "exp:rlqs:{") {
		t.Fatalf("key %s", r.Key("b"))
	}
	rep := &Report{Group: "b", Instance: "a", Demand: Leave}
	if err := r.Merge(ctx, []*Report{rep}); err != nil || rep.Known+rep.Unknown != 0 {
		t.Fatalf("leave: %+v %v", rep, err)
	}
	if n, _ := c.Exists(ctx, r.keys("b")...).Result(); n != 0 {
		t.Fatal("the empty bucket's keys are still there")
	}
}

// An instance's share of a limit, by the fleet's answer.
func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		r    Report
		want float64
	}{
		{Report{Demand: Unknown, Unknown: 1}, 100},                     // alone, not measured
		{Report{Demand: Unknown, Unknown: 1, Known: 3, Sum: 9000}, 25}, // an equal share
		{Report{Demand: 3000, Known: 3, Unknown: 1, Sum: 9000}, 25},    // a third of the known three's 75
		{Report{Demand: 0, Known: 2, Sum: 0}, 50},                      // nobody asks: equal
		{Report{Demand: 6000, Known: 2, Sum: 8000}, 75},                // by demand
		{Report{Demand: 6000, Known: MaxInstances, Sum: 8000, Full: true}, 100.0 / (MaxInstances + 1)},
	} {
		if got := split(100, &tc.r); got != tc.want {
			t.Errorf("%+v: %v, want %v", tc.r, got, tc.want)
		}
	}
}

// As docs/redis.md's least-privilege user, the fleet's script runs: a report, another
// instance's, and both leaving (which deletes the bucket's keys).
func TestFleetDocUser(t *testing.T) {
	r := NewRedis(redistest.StartAs(t, redistest.DocUser(t)), "diana:", nil)
	for _, rep := range []*Report{
		{Group: "g", Instance: "a", Demand: 5000, TTL: 2 * time.Second},
		{Group: "g", Instance: "b", Demand: 3000, TTL: 2 * time.Second},
		{Group: "g", Instance: "a", Demand: Leave},
		{Group: "g", Instance: "b", Demand: Leave},
	} {
		if err := r.Merge(context.Background(), []*Report{rep}); err != nil {
			t.Fatalf("%+v: %v", rep, err)
		}
	}
}
