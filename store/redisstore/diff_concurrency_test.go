package redisstore

import (
	"cmp"
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/diana-gw/diana/internal/redistest"
	"github.com/diana-gw/diana/shared/algos"
)

func TestDiffConcurrency(t *testing.T) {
	s := algos.Second
	runDiff(t, []diffCase{
		{name: "3 in flight, 10 s leases", alg: must(algos.NewConcurrency(3, 10*s)), maxGap: 3 * s, maxCost: 4, leases: true, backwards: true, sameState: sameLeases},
		{name: "1 in flight, 1 ms leases", alg: must(algos.NewConcurrency(1, algos.Millisecond)), maxGap: 2 * algos.Millisecond, maxCost: 2, leases: true, backwards: true, sameState: sameLeases},
		{name: "2 in flight, 1 µs leases", alg: must(algos.NewConcurrency(2, 1)), maxGap: 10, maxCost: 3, leases: true, backwards: true, sameState: sameLeases},
		{name: "100 in flight, 1 min leases", alg: must(algos.NewConcurrency(100, algos.Minute)), maxGap: 10 * s, maxCost: 150, leases: true, backwards: true, sameState: sameLeases},
		{name: "extreme: 10,000 in flight, 10-year leases", alg: must(algos.NewConcurrency(algos.MaxConcurrency, algos.MaxSpan)), steps: 1000, maxGap: algos.Day, maxCost: 12_000, leases: true, backwards: true, sameState: sameLeases},
		{name: "banned", alg: must(algos.NewBan(must(algos.NewConcurrency(2, s)), 2*s)), maxGap: s, maxCost: 3, leases: true, backwards: true, sameState: sameLeases},
	})
}

// sameLeases compares the Go log, one (expiry, id, slots) triple per lease, with the scores of the
// sorted set, one per slot, in ZRANGE order.
func sameLeases(goSt, redisSt algos.State) bool {
	var slots []int64
	for j := 0; j+2 < len(goSt.Log); j += 3 {
		for range goSt.Log[j+2] {
			slots = append(slots, goSt.Log[j])
		}
	}
	return goSt.W == redisSt.W && goSt.Ban == redisSt.Ban && slices.Equal(slots, redisSt.Log) && len(goSt.Log)%3 == 0
}

// TestDiffConcurrencyRetake replays traces whose ids come from a small pool, so that held ids
// are taken again (renewed or resized, for real or as dry runs), released twice and released
// after expiry, and compares the decisions and the leases themselves (members, not only scores).
func TestDiffConcurrencyRetake(t *testing.T) {
	srv := redistest.Start(t)
	s := New(srv.Client(), Options{CallerClock: true})
	ctx := context.Background()
	for ci, p := range []struct{ max, ttl, maxGap, maxCost int64 }{
		{3, 10 * algos.Second, 3 * algos.Second, 4},
		{20, algos.Second, 100 * algos.Millisecond, 25},
	} {
		alg := must(algos.NewConcurrency(p.max, p.ttl))
		key := "retake:" + strconv.Itoa(ci)
		stateKey, _ := s.Keys(key)
		rng := rand.New(rand.NewPCG(uint64(ci)+7, 42))
		var st algos.State
		now := int64(1_700_000_000_000_000)
		for i := range 5000 {
			now += gap(rng, p.maxGap)
			if rng.IntN(50) == 0 {
				now -= rng.Int64N(p.maxGap + 1)
			}
			r := algos.Request{Now: now, Cost: cost(rng, p.maxCost), ID: rng.Int64N(2*p.max + 1), Release: rng.IntN(3) == 0}
			r.DryRun = !r.Release && rng.IntN(5) == 0 // renewing or resizing held ids too
			want := goDecide(alg, &st, r)
			got, err := s.DecideOne(ctx, key, alg, r)
			if err != nil {
				t.Fatalf("case %d step %d %+v: %v", ci, i, r, err)
			}
			if got != want {
				t.Fatalf("case %d step %d %+v:\n  go  %+v\n  lua %+v", ci, i, r, want, got)
			}
			zs, err := s.c.ZRangeWithScores(ctx, stateKey, 0, -1).Result()
			if err != nil {
				t.Fatal(err)
			}
			if len(zs) > 0 {
				// Every write leaves a TTL on the key, even one that emptied and refilled it.
				if ttl, err := s.c.PTTL(ctx, stateKey).Result(); err != nil || ttl <= 0 {
					t.Fatalf("case %d step %d %+v: key TTL %v, %v", ci, i, r, ttl, err)
				}
			}
			// Rebuild the leases from the members "id:k": one score per lease, k = 1..slots.
			var leases [][3]int64
			topK := map[int64]int64{}
			for _, z := range zs {
				id, k, _ := strings.Cut(z.Member.(string), ":")
				lid, _ := strconv.ParseInt(id, 10, 64)
				slot, _ := strconv.ParseInt(k, 10, 64)
				at := slices.IndexFunc(leases, func(l [3]int64) bool { return l[1] == lid })
				if at < 0 {
					leases = append(leases, [3]int64{int64(z.Score), lid, 0})
					at = len(leases) - 1
				}
				if leases[at][0] != int64(z.Score) {
					t.Fatalf("case %d step %d: lease %d has members of different expiries: %v", ci, i, lid, zs)
				}
				leases[at][2]++
				topK[lid] = max(topK[lid], slot)
			}
			for _, l := range leases {
				if topK[l[1]] != l[2] {
					t.Fatalf("case %d step %d: lease %d has %d members up to k = %d", ci, i, l[1], l[2], topK[l[1]])
				}
			}
			var goLeases [][3]int64
			for j := 0; j < len(st.Log); j += 3 {
				goLeases = append(goLeases, [3]int64(st.Log[j:j+3]))
			}
			byExpiry := func(a, b [3]int64) int { return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1])) }
			slices.SortFunc(leases, byExpiry)
			slices.SortFunc(goLeases, byExpiry)
			if !slices.Equal(leases, goLeases) {
				t.Fatalf("case %d step %d %+v: leases differ\n  go  %v\n  lua %v", ci, i, r, goLeases, leases)
			}
		}
	}
}
