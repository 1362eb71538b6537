// Package memstore keeps the state of the algorithms of shared/algos in process memory: a
// sharded map, safe for concurrent use, bounded in size, whose idle entries expire.
//
// A decision on a known key takes one shard lock and allocates nothing; so does a dry run
// (Request.DryRun), once the shard's scratch log has grown to the largest log it copies.
package memstore

import (
	"hash/maphash"
	"sync"
	"time"

	"github.com/diana-gw/diana/shared/algos"
)

const (
	shardCount = 64 // a power of two
	sampleSize = 8  // entries looked at to choose one to evict
)

// Options tune a Store.
type Options struct {
	// MaxEntries bounds the number of identities kept; default 1,000,000, and at least 64 (one
	// per shard). Each of the 64 shards holds its share; when a shard is full, an expired entry
	// of it is dropped, or else the one closest to expiry among a few sampled: that identity
	// starts afresh if it comes back. As keys spread unevenly over the shards, a store may start
	// evicting somewhat before it holds MaxEntries.
	MaxEntries int
	// Clock returns the time in µs; default a monotonic clock.
	Clock func() int64
}

// Store holds algorithm states by key. Keys must be unique per limit: two limits sharing a Store
// must not share keys.
type Store struct {
	seed   maphash.Seed
	now    func() int64
	shards [shardCount]shard
}

type shard struct {
	mu  sync.Mutex
	m   map[string]*entry
	max int
	// scratch is the copy of a state that a dry run decides on, kept here (under mu) so that
	// dry runs reuse it rather than allocate.
	scratch algos.State
	_       [40]byte // keep shards on separate cache lines
}

type entry struct {
	st      algos.State
	expires int64 // µs; from then on the state decides as an empty one would
}

// New returns an empty Store.
func New(o Options) *Store {
	if o.MaxEntries <= 0 {
		o.MaxEntries = 1_000_000
	}
	if o.Clock == nil {
		start := time.Now()
		base := start.UnixMicro()
		o.Clock = func() int64 { return base + time.Since(start).Microseconds() }
	}
	s := &Store{seed: maphash.MakeSeed(), now: o.Clock}
	// The shares add up to MaxEntries exactly: the remainder goes one apiece to the first shards.
	per, rest := o.MaxEntries/shardCount, o.MaxEntries%shardCount
	for i := range s.shards {
		s.shards[i].m = make(map[string]*entry)
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
// A dry run (r.DryRun) returns the decision the same request would get, decided on a copy of the
// state: the stored state, its expiry and any ban stay as they were, and a key not held is not
// added.
func (s *Store) Decide(key string, alg algos.Algorithm, r algos.Request) algos.Decision {
	r = r.Bounded()
	// Read the clock outside the lock, to keep the lock short. A request that then waits for the
	// lock behind a later one decides with an earlier time: the algorithms treat that as a clock
	// going back, which never adds capacity.
	r.Now = s.now()
	sh := &s.shards[maphash.String(s.seed, key)&(shardCount-1)]
	sh.mu.Lock()
	e := sh.m[key]
	if r.DryRun {
		d := sh.dryRun(e, alg, r)
		sh.mu.Unlock()
		return d
	}
	if e == nil {
		var fresh entry
		d := alg.Decide(&fresh.st, r)
		if d.TTL > 0 {
			fresh.expires = r.Now + d.TTL
			sh.insert(key, &fresh, r.Now)
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

// dryRun decides r on a copy of e's state (nil: a key not held) in the shard's scratch state,
// the log copied too, as algorithms change it in place. The caller holds sh.mu.
func (sh *shard) dryRun(e *entry, alg algos.Algorithm, r algos.Request) algos.Decision {
	st := &sh.scratch
	*st = algos.State{Log: st.Log[:0]}
	if e != nil && e.expires > r.Now { // else it decides as an empty state
		st.W, st.Ban = e.st.W, e.st.Ban
		st.Log = append(st.Log, e.st.Log...)
	}
	return alg.Decide(st, r) // st.Log keeps what an admission grew, for the next dry run
}

// Len returns the number of entries held, expired ones included until they are dropped.
func (s *Store) Len() int {
	n := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
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
		for k, e := range sh.m {
			if e.expires <= now {
				delete(sh.m, k)
				dropped++
			}
		}
		sh.mu.Unlock()
	}
	return dropped
}

// insert adds e, first making room if the shard is full.
func (sh *shard) insert(key string, e *entry, now int64) {
	if len(sh.m) >= sh.max {
		var victim string
		oldest, seen := int64(0), 0
		for k, v := range sh.m { // map order is random: a sample
			if v.expires <= now {
				delete(sh.m, k)
				if len(sh.m) < sh.max {
					break
				}
				continue
			}
			if victim == "" || v.expires < oldest {
				victim, oldest = k, v.expires
			}
			if seen++; seen >= sampleSize {
				break
			}
		}
		if len(sh.m) >= sh.max && victim != "" {
			delete(sh.m, victim)
		}
	}
	sh.m[key] = e
}
