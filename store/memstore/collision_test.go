package memstore

import (
	"hash/maphash"
	"slices"
	"testing"

	"github.com/diana-gw/diana/shared/algos"
)

// collide makes the store hold an entry for each of others under the hash of key, as if their
// hashes collided with key's (at 64 bits no two keys are known to), each with its own state,
// W[0] distinct and far ahead. It returns key's hash.
func collide(s *Store, key string, expires int64, others ...string) uint64 {
	h := maphash.String(s.seed, key)
	sh := &s.shards[h&(shardCount-1)]
	for i, k := range others {
		e := &entry{key: k, expires: expires}
		e.st.W[0] = expires + int64(i) // a TAT far ahead: a decision on it is a denial
		e.st.Ban = expires
		sh.add(h, e)
	}
	return h
}

// TestHashCollisions: keys whose hashes collide keep apart states: each decides on its own, is
// reset, unbanned, listed, swept, evicted and counted on its own, whatever its place in the
// chain.
func TestHashCollisions(t *testing.T) {
	g := gcra(t, 10, algos.Second, 10)
	t.Run("decide, reset, unban", func(t *testing.T) {
		s, c := newStore(0)
		now := c.get()
		decide := func(want int64) {
			t.Helper()
			if d := s.Decide("k", g, algos.Request{Cost: 1}); d.Remaining != want {
				t.Fatalf("k: %+v, want %d remaining: k decided on another's state", d, want)
			}
		}
		others := func(want ...string) {
			t.Helper()
			bans, _ := s.Bans(func(string) bool { return true }, 10)
			var names []string
			for _, b := range bans {
				names = append(names, b.Key)
			}
			if slices.Sort(names); !slices.Equal(names, want) || s.Len() != len(want)+1 {
				t.Fatalf("bans of %v and %d entries, want bans of %v and k's entry", names, s.Len(), want)
			}
		}
		h := collide(s, "k", now+algos.Hour, "a")
		sh := &s.shards[h&(shardCount-1)]
		decide(9) // the chain: k a
		decide(8)
		collide(s, "k", now+algos.Hour, "b") // b k a: k in the middle
		decide(7)
		others("a", "b")
		sh.find(h, "k").st.Ban = now + algos.Hour
		if !s.Unban("k") || sh.find(h, "k").st.Ban != 0 {
			t.Fatal("Unban(k) lifted no ban")
		}
		others("a", "b")
		if !s.Reset("k") || sh.find(h, "k") != nil || s.Len() != 2 {
			t.Fatal("Reset(k) in the middle of the chain dropped another entry or none")
		}
		decide(9) // k b a: k at the head
		if !s.Reset("k") || sh.find(h, "k") != nil || s.Len() != 2 {
			t.Fatal("Reset(k) at the head of the chain dropped another entry or none")
		}
		s, _ = newStore(0) // another seed
		decide(9)
		h = collide(s, "k", now+algos.Hour, "a", "b") // b a k: k at the tail
		sh = &s.shards[h&(shardCount-1)]
		decide(8)
		others("a", "b")
		if !s.Reset("k") || s.Len() != 2 {
			t.Fatal("Reset(k) at the tail of the chain dropped another entry or none")
		}
		for i, k := range []string{"a", "b"} {
			if e := sh.find(h, k); e == nil || e.st.W[0] != now+algos.Hour+int64(i) {
				t.Fatalf("%s's entry %+v changed", k, e)
			}
		}
	})
	t.Run("sweep", func(t *testing.T) {
		s, c := newStore(0)
		now := c.get()
		h := collide(s, "k", now+algos.Second, "a")
		collide(s, "k", now+algos.Hour, "b")
		collide(s, "k", now+algos.Second, "c")
		sh := &s.shards[h&(shardCount-1)]
		c.now.Add(algos.Minute)
		if n := s.Sweep(); n != 2 || sh.find(h, "b") == nil || sh.n != 1 {
			t.Fatalf("Sweep dropped %d, want the 2 expired of a chain of 3 (b held: %v)", n, sh.find(h, "b") != nil)
		}
	})
	t.Run("evict", func(t *testing.T) {
		s, c := newStore(shardCount) // one entry a shard
		now := c.get()
		h := collide(s, "k", now+algos.Hour, "a")
		sh := &s.shards[h&(shardCount-1)]
		// The shard is full: k's first decision evicts a (not banned: the only one).
		sh.find(h, "a").st.Ban = 0
		s.Decide("k", g, algos.Request{Cost: 1})
		if sh.find(h, "a") != nil || sh.find(h, "k") == nil || sh.n != 1 || s.Stats().Evicted != 1 {
			t.Fatalf("k did not take a's place: a %v, k %v, %d held", sh.find(h, "a"), sh.find(h, "k"), sh.n)
		}
	})
}
