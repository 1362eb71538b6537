// Package memstore keeps the state of the algorithms of shared/algos in process memory: a
// sharded map, safe for concurrent use, bounded in size, whose idle entries expire. When full,
// it evicts the entry closest to expiry among a sample, never one under a ban while another can
// go: a flood of new identities does not lift bans (Options.MaxEntries; Stats counts evictions).
//
// A decision on a known key takes one shard lock and allocates nothing; so does a dry run
// (Request.DryRun), which the algorithms decide without changing the state.
//
// A key is hashed once (maphash, seeded per store): the hash picks the shard, and the shard's
// map is keyed by the same 64-bit hash, not by the key, so that the map does not hash the key a
// second time. The entry keeps its key, which a lookup compares; keys whose hashes collide (rare
// at 64 bits, but possible) chain through entry.next, so a lookup is exact for any keys.
package memstore

import (
	"hash/maphash"
	"sync"
	"time"
	_ "unsafe" // go:linkname, for the monotonic clock

	"github.com/diana-gw/diana/shared/algos"
)

const (
	shardCount = 64 // a power of two
	sampleSize = 8  // entries looked at to choose one to evict
	// maxScan bounds the entries looked at past a sample in which every entry is banned.
	maxScan = 64
)

// DefaultMaxEntries is the bound of a Store whose Options leave it unset: sized for a small
// container (docs/configuration.md gives the memory an entry takes).
const DefaultMaxEntries = 250_000

// Options tune a Store.
type Options struct {
	// MaxEntries bounds the number of identities kept; default DefaultMaxEntries, and at least
	// 64 (one per shard). Each of the 64 shards holds its share; when a shard is full, an
	// expired entry of it is dropped, or else (an eviction) the one closest to expiry among a few
	// sampled, an identity under a ban only if every entry looked at is banned: the evicted
	// identity starts afresh if it comes back, and a flood of new identities does not lift bans.
	// As keys spread unevenly over the shards, a store may start evicting somewhat before it
	// holds MaxEntries.
	MaxEntries int
	// Clock returns the time in µs; default a monotonic clock.
	Clock func() int64
}

// Store holds algorithm states by key. Keys must be unique per limit: two limits sharing a Store
// must not share keys.
type Store struct {
	seed   maphash.Seed
	clock  func() int64 // Options.Clock; nil: the monotonic clock below
	start  int64        // the monotonic clock: base + (nanotime() − start)/1000
	base   int64
	shards [shardCount]shard
}

type shard struct {
	mu  sync.Mutex
	m   map[uint64]*entry // by the key's hash; the entries of colliding keys chain
	n   int               // entries held, chained ones included
	max int
	// empty is the state a dry run on a key not held decides on: the algorithms leave a dry
	// run's state as it was, so it stays empty, and a pointer to it allocates nothing.
	empty   algos.State
	evicted int64    // live entries dropped to make room
	_       [32]byte // keep shards on separate cache lines
}

type entry struct {
	st      algos.State
	expires int64 // µs; from then on the state decides as an empty one would
	key     string
	next    *entry // another key of the same hash
}

// New returns an empty Store.
func New(o Options) *Store {
	if o.MaxEntries <= 0 {
		o.MaxEntries = DefaultMaxEntries
	}
	s := &Store{seed: maphash.MakeSeed(), clock: o.Clock, start: nanotime(), base: time.Now().UnixMicro()}
	// The shares add up to MaxEntries exactly: the remainder goes one apiece to the first shards.
	per, rest := o.MaxEntries/shardCount, o.MaxEntries%shardCount
	for i := range s.shards {
		s.shards[i].m = make(map[uint64]*entry)
		n := per
		if i < rest {
			n++
		}
		s.shards[i].max = max(1, n)
	}
	return s
}

// Decide applies r to the identity key under alg, at the store's clock (r.Now is ignored).
//
// A dry run (r.DryRun) returns the decision the same request would get: the algorithms leave the
// state as it was (its expiry and any ban too), and a key not held is not added.
func (s *Store) Decide(key string, alg algos.Algorithm, r algos.Request) algos.Decision {
	if r.Cost < 0 || r.Cost > algos.MaxCount || r.MaxWait < 0 || r.MaxWait > algos.MaxWaitCap {
		r = r.Bounded() // rare: a copy of r costs more than these tests
	}
	// Read the clock outside the lock, to keep the lock short. A request that then waits for the
	// lock behind a later one decides with an earlier time: the algorithms treat that as a clock
	// going back, which never adds capacity.
	r.Now = s.now()
	h := maphash.String(s.seed, key)
	sh := &s.shards[h&(shardCount-1)]
	sh.mu.Lock()
	e := sh.find(h, key)
	if r.DryRun {
		st := &sh.empty
		if e != nil && e.expires > r.Now { // else it decides as an empty state
			st = &e.st
		}
		d := alg.Decide(st, r)
		sh.mu.Unlock()
		return d
	}
	if e == nil {
		fresh := entry{key: key}
		d := alg.Decide(&fresh.st, r)
		if d.TTL > 0 {
			fresh.expires = r.Now + d.TTL
			sh.insert(h, &fresh, r.Now)
		}
		sh.mu.Unlock()
		return d
	}
	if e.expires <= r.Now {
		e.st = algos.State{Log: e.st.Log[:0]}
	}
	d := alg.Decide(&e.st, r)
	e.expires = r.Now + d.TTL
	sh.mu.Unlock()
	return d
}

// DecideAt applies r to key as Decide does, but at r.Now instead of the store's clock: for
// rebuilding a state from what another store held at past times (store/failover, entering an
// outage). Times must not go back for a key; a request at the store's clock follows as usual.
// It is never a dry run: rebuilding a state writes it.
func (s *Store) DecideAt(key string, alg algos.Algorithm, r algos.Request) algos.Decision {
	r = r.Bounded()
	r.DryRun = false
	h := maphash.String(s.seed, key)
	sh := &s.shards[h&(shardCount-1)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.find(h, key)
	if e == nil {
		fresh := entry{key: key}
		d := alg.Decide(&fresh.st, r)
		if d.TTL > 0 {
			fresh.expires = r.Now + d.TTL
			sh.insert(h, &fresh, r.Now)
		}
		return d
	}
	if e.expires <= r.Now {
		e.st = algos.State{Log: e.st.Log[:0]}
	}
	d := alg.Decide(&e.st, r)
	e.expires = r.Now + d.TTL
	return d
}

// Now returns the store's clock, µs.
func (s *Store) Now() int64 { return s.now() }

// now returns the time in µs. The default clock is read directly, not through a function value,
// and from the runtime's monotonic clock, the one time.Since reads, without time.Since's work
// around it: the clock is the largest part of a decision's time.
func (s *Store) now() int64 {
	if s.clock != nil {
		return s.clock()
	}
	return s.base + (nanotime()-s.start)/1000
}

// nanotime is the runtime's monotonic clock in ns (what time.Now's monotonic reading and
// time.Since read), pulled by go:linkname as the runtime allows it to be for this use.
//
//go:linkname nanotime runtime.nanotime
func nanotime() int64

// Len returns the number of entries held, expired ones included until they are dropped.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += sh.n
		sh.mu.Unlock()
	}
	return n
}

// Stats are a Store's size and evictions, for metrics.
type Stats struct {
	Entries    int   // held now, expired ones included until they are dropped
	MaxEntries int   // the bound (Options.MaxEntries, at least 64)
	Evicted    int64 // live entries dropped to make room since the Store was made
}

// Stats returns the store's figures; it locks one shard at a time.
func (s *Store) Stats() Stats {
	var st Stats
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		st.Entries += sh.n
		st.MaxEntries += sh.max
		st.Evicted += sh.evicted
		sh.mu.Unlock()
	}
	return st
}

// Sweep drops the entries whose state has expired and returns how many it dropped. Expired
// entries already decide as fresh ones and make room when the store is full; sweeping now and
// then also gives their memory back after a burst of distinct keys. It locks one shard at a time.
func (s *Store) Sweep() int {
	now := s.now()
	dropped := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for h, head := range sh.m {
			for e, next := head, (*entry)(nil); e != nil; e = next {
				next = e.next
				if e.expires <= now {
					sh.remove(h, e)
					dropped++
				}
			}
		}
		sh.mu.Unlock()
	}
	return dropped
}

// find returns the entry of key, whose hash is h; nil if the shard holds none.
func (sh *shard) find(h uint64, key string) *entry {
	e := sh.m[h]
	for e != nil && e.key != key {
		e = e.next
	}
	return e
}

// add adds e, of hash h, which the shard does not hold.
func (sh *shard) add(h uint64, e *entry) {
	e.next = sh.m[h]
	sh.m[h] = e
	sh.n++
}

// remove drops e, of hash h, which the shard holds.
func (sh *shard) remove(h uint64, e *entry) {
	head := sh.m[h]
	switch {
	case head != e:
		for head.next != e {
			head = head.next
		}
		head.next = e.next
	case e.next != nil:
		sh.m[h] = e.next
	default:
		delete(sh.m, h)
	}
	e.next = nil
	sh.n--
}

// insert adds e, of hash h, first making room if the shard is full: expired entries go first;
// else the live entry closest to expiry among a sample, unbanned before banned (a ban ends only
// at its time, unless every entry looked at, up to maxScan, is banned).
func (sh *shard) insert(h uint64, e *entry, now int64) {
	if sh.n >= sh.max {
		var victim *entry
		var victimHash uint64
		victimBanned := false
		seen := 0
	scan:
		for vh, head := range sh.m { // map order is random: a sample
			for v, next := head, (*entry)(nil); v != nil; v = next {
				next = v.next
				if v.expires <= now {
					sh.remove(vh, v)
					if sh.n < sh.max {
						break scan
					}
					continue
				}
				banned := v.st.Ban > now
				if victim == nil || victimBanned && !banned || victimBanned == banned && v.expires < victim.expires {
					victim, victimHash, victimBanned = v, vh, banned
				}
				if seen++; seen >= sampleSize && !victimBanned || seen >= maxScan {
					break scan
				}
			}
		}
		if sh.n >= sh.max && victim != nil {
			sh.remove(victimHash, victim)
			sh.evicted++
		}
	}
	sh.add(h, e)
}
