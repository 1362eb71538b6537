package redisstore

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/diana-gw/diana/internal/redistest"
	"github.com/diana-gw/diana/shared/algos"
)

// Reset, Unban and Bans on a real redis-server, standalone and as a Cluster: Bans finds the
// identities a ban holds, in both forms of key (an identity with a '}' included), bounded.
func TestAdmin(t *testing.T) {
	ctx := context.Background()
	inner, _ := algos.NewFixedWindow(2, algos.Minute)
	alg, _ := algos.NewBan(inner, algos.Hour)
	for _, topo := range []string{"standalone", "cluster"} {
		t.Run(topo, func(t *testing.T) {
			var c redis.UniversalClient
			if topo == "cluster" {
				srv := redistest.StartCluster(t)
				c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{srv.Addr}})
			} else {
				c = redistest.Start(t).Client()
			}
			defer c.Close()
			s := New(c, Options{Prefix: "p*:"}) // a glob character in the prefix is matched as itself
			take := func(key string) algos.Decision {
				d, err := s.DecideOne(ctx, key, alg, algos.Request{Cost: 1})
				if err != nil {
					t.Fatal(err)
				}
				return d
			}
			banned := []string{"r|a}b", "r|", "r"}
			for i := range 4 {
				banned = append(banned, fmt.Sprintf("r|%d", i))
			}
			for _, k := range append(slices.Clone(banned), "other|0") {
				for range 3 { // the third is denied and bans
					take(k)
				}
			}
			take("r|free")
			bans, more, err := s.Bans(ctx, "r", nil, 100)
			if err != nil {
				t.Fatal(err)
			}
			var keys []string
			for _, b := range bans {
				keys = append(keys, b.Key)
				if b.Left <= 0 || b.Left > algos.Hour {
					t.Errorf("%s: left %d µs, want within an hour", b.Key, b.Left)
				}
			}
			slices.Sort(keys)
			slices.Sort(banned)
			if !slices.Equal(keys, banned) || more {
				t.Errorf("Bans = %q, %v; want %q", keys, more, banned)
			}
			if bans, more, err := s.Bans(ctx, "r", func(k string) bool { return k != "r" }, 2); err != nil || len(bans) != 2 || !more {
				t.Errorf("Bans with max 2: %v, more %v, %v", bans, more, err)
			}
			for _, op := range []struct {
				name string
				f    func(string) (bool, error)
				key  string
				want bool
			}{
				{"Unban", func(k string) (bool, error) { return s.Unban(ctx, k) }, "r|a}b", true},
				{"Unban again", func(k string) (bool, error) { return s.Unban(ctx, k) }, "r|a}b", false},
				{"Unban unbanned", func(k string) (bool, error) { return s.Unban(ctx, k) }, "r|free", false},
				{"Reset", func(k string) (bool, error) { return s.Reset(ctx, k) }, "r|0", true},
				{"Reset again", func(k string) (bool, error) { return s.Reset(ctx, k) }, "r|0", false},
			} {
				if got, err := op.f(op.key); got != op.want || err != nil {
					t.Errorf("%s(%q) = %v, %v; want %v", op.name, op.key, got, err, op.want)
				}
			}
			if d := take("r|a}b"); d.Allowed { // unbanned, its window still spent
				t.Errorf("after Unban: %+v, want denied by the window", d)
			}
			if d := take("r|0"); !d.Allowed || d.Remaining != 1 {
				t.Errorf("after Reset: %+v, want a fresh window", d)
			}
		})
	}
}
