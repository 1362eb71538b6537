package failover

import (
	"cmp"
	"context"
	"errors"
	"hash/maphash"
	"math/bits"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/redisstore"
)

// Transitions across an outage, for the ops whose policy is rules.FailLocal. Over a whole
// outage the limit holds only if both of its edges hand nothing out twice:
//
//   - Into the outage: a node that starts deciding a key alone starts from what it last learned
//     from Redis for that key, not from an empty state. Each op Redis decides leaves its
//     Remaining, Limit and the time its state would be fresh again (ResetAfter) with the key; the
//     first time a key falls back in an outage, the node's local state of that key is dropped and
//     charged, as a partial request at the time Redis decided, with what its local limit (the
//     learned share, or the rule's fallback) holds beyond its part of that remaining: local
//     limit × (1 − remaining / limit), rounded up. An algorithm whose count drains as requests
//     age out of a sliding window (algos.Sliding) gets that charge spread evenly over the window
//     before that time, in seedParts requests, as a steady client's requests lie in its log. A
//     key whose learned state has since reset, or that was never learned, starts empty. A
//     rule holding leases (concurrency) is not carried over: its leases are given back as
//     requests end; nor is a paced algorithm (algos.Paced: warm_up), whose Remaining does not
//     tell its state (its coldness): it starts and ends an outage from its local state as
//     before.
//   - Out of the outage: the units each node admitted on its own are written back into Redis's
//     state when Redis returns, before the node decides in Redis again: the first round trip
//     after an outage is the write-back (Options.WriteBack: one script per key, applied once per
//     node and outage, so a retry after a lost reply charges nothing twice), and the decisions
//     follow only once it went through. A write-back charges what the state still holds (a
//     partial request: Redis's state saturates, the requests were answered already) and never
//     starts a ban. It writes back the units admitted alone that the node's local state still
//     counts (at most its local limit less what it would still admit, looked up at the
//     write-back): units that have since drained from the local state (a fixed window that
//     ended, a bucket that refilled) have drained from the cluster's too. A sliding algorithm's
//     units go back at the times they were admitted, to an eighth of the window
//     (redisstore.Back's Ago: Redis places them that long before its own time), those older
//     than a window left out, and backdated (algos.Request.Backdated): the sliding log records
//     them at that time even when another node's write-back put later entries before them.
//     A key Redis answered with an error for writeBackTries round trips is given up and
//     reported (Options.OnWriteBack).
//
// What a key keeps is bounded (maxTransitionKeys): past it, keys with nothing owed are forgotten
// (they then start an outage empty, as before this existed).
type transitions struct {
	store    localStore // Options.Local
	node     string
	clock    func() int64
	write    func(ctx context.Context, backs []redisstore.Back)
	onGiveUp func(key string, units int64, err error)

	seed   maphash.Seed
	shards [transitionShards]transitionShard

	epoch atomic.Int64 // outages seen: 0 before the first
	down  atomic.Bool  // the last round trip failed: an outage is under way
	owing atomic.Int64 // keys with units to write back
	marks atomic.Int64 // markers made
	wmu   sync.Mutex   // one write-back at a time: two would settle the same units twice
}

// marker returns a marker no other write-back of this node has: one per key and batch of owed
// units, kept across the retries of that batch.
func (tr *transitions) marker(epoch int64) string {
	return tr.node + ":" + strconv.FormatInt(epoch, 10) + ":" + strconv.FormatInt(tr.marks.Add(1), 10)
}

const (
	transitionShards = 16
	// maxTransitionKeys bounds the keys a node keeps transition state of (about 150 bytes each,
	// and the key).
	maxTransitionKeys = 1 << 16
	// writeBackTries is how many round trips that Redis answered may fail a key's write-back
	// before it is given up.
	writeBackTries = 3
)

type transitionShard struct {
	mu   sync.Mutex
	keys map[string]*keyTransition
}

// keyTransition is what a node keeps of a key across outages.
type keyTransition struct {
	// What Redis said last: remaining units of limit, until the µs (Options.Clock) at which its
	// state would be fresh again; limit 0: nothing learned.
	remaining, limit, until, at int64
	seeded                      int64 // the outage whose local state was seeded (epoch); 0: none

	// Units admitted locally and not yet written back, to write back with alg; local is the
	// algorithm they were admitted with on this node.
	owed  int64
	alg   algos.Algorithm
	local algos.Algorithm
	tries int
	mark  string // the write-back's marker: this node, the outage, and a number of its own
	// parts are the owed units of a sliding algorithm by when they were admitted: the last
	// window in eighths, a ring (µs, Clock).
	parts *[seedParts]part // allocated for a sliding algorithm's first owed units
}

// part is the units admitted in the eighth of a window from from.
type part struct{ from, units int64 }

func (tr *transitions) shard(key string) *transitionShard {
	return &tr.shards[maphash.String(tr.seed, key)%transitionShards]
}

// get returns key's entry, adding it if add is set (nil when the shard is full of keys that owe).
func (sh *transitionShard) get(key string, add bool) *keyTransition {
	if sh.keys == nil {
		sh.keys = map[string]*keyTransition{}
	}
	k := sh.keys[key]
	if k != nil || !add {
		return k
	}
	if len(sh.keys) >= maxTransitionKeys/transitionShards {
		for kk, e := range sh.keys {
			if e.owed == 0 {
				delete(sh.keys, kk)
			}
		}
		if len(sh.keys) >= maxTransitionKeys/transitionShards {
			return nil
		}
	}
	k = &keyTransition{}
	sh.keys[key] = k
	return k
}

// learn keeps what Redis decided for op.
func (tr *transitions) learn(op *rules.Op) {
	if !transits(op) || op.Req.DryRun || op.Batch != nil || op.Dec.Limit <= 0 {
		return
	}
	sh := tr.shard(op.Key)
	sh.mu.Lock()
	if k := sh.get(op.Key, true); k != nil {
		now := tr.clock()
		k.remaining, k.limit, k.until, k.at = op.Dec.Remaining, op.Dec.Limit, now+op.Dec.ResetAfter, now
	}
	sh.mu.Unlock()
}

// failed notes a round trip that Redis did not answer: the first after an answered one starts
// an outage.
func (tr *transitions) failed() {
	if tr.down.CompareAndSwap(false, true) {
		tr.epoch.Add(1)
	}
}

// answered notes a round trip that Redis answered.
func (tr *transitions) answered() { tr.down.Store(false) }

// local decides op in local with alg, as the outage's first decision of op.Key seeds it, and
// books the units it admits to be written back.
func (tr *transitions) local(op *rules.Op, alg algos.Algorithm) algos.Decision {
	local := tr.store
	if !transits(op) {
		return local.Decide(op.Key, alg, op.Req)
	}
	epoch := max(tr.epoch.Load(), 1) // an op may fall back (breaker open at start) before any round trip failed
	sh := tr.shard(op.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	k := sh.get(op.Key, true)
	if k != nil && k.seeded != epoch {
		k.seeded = epoch
		local.Reset(op.Key) // what an earlier outage left
		if lim := alg.Script().Limit; k.limit > 0 && tr.clock() < k.until && lim > 0 {
			keep := mulDivDown(min(max(k.remaining, 0), k.limit), lim, k.limit)
			seed(local, op.Key, alg, k.at, lim-keep)
		}
	}
	d := local.Decide(op.Key, alg, op.Req)
	if g := d.Granted; g > 0 && !op.Req.DryRun && !op.Req.Release && tr.write != nil {
		if k == nil {
			if tr.onGiveUp != nil {
				tr.onGiveUp(op.Key, g, errTooManyKeys)
			}
			return d
		}
		now := tr.clock()
		if k.owed == 0 {
			tr.owing.Add(1)
			k.mark, k.tries = tr.marker(epoch), 0
			k.parts = nil
		}
		k.owed += g
		k.alg, k.local = op.Alg, alg
		if op.Batch != nil {
			k.alg = op.Batch.Algorithm
		}
		if w := slidingWindow(k.alg); w >= seedParts {
			// When, to an eighth of the window: the write-back places them there.
			span := w / seedParts
			if k.parts == nil {
				k.parts = new([seedParts]part)
			}
			p := &k.parts[now/span%seedParts]
			if from := now - now%span; p.from != from {
				*p = part{from: from}
			}
			p.units += g
		}
	}
	return d
}

// writeBack writes back every key's owed units in one call of Options.WriteBack, and reports
// whether Redis answered: false, with the first error, when no op got an answer (Redis still
// cannot be reached). A Redis error reply (redis.Error) is an answer: that key's failure.
func (tr *transitions) writeBack(ctx context.Context) (bool, error) {
	if tr.owing.Load() == 0 || tr.write == nil {
		return true, nil
	}
	tr.wmu.Lock()
	defer tr.wmu.Unlock()
	now := tr.clock()
	var backs []redisstore.Back
	var keys []keyBack
	for i := range tr.shards {
		sh := &tr.shards[i]
		sh.mu.Lock()
		for key, k := range sh.keys {
			if k.owed == 0 {
				continue
			}
			kb := keyBack{key: key, owed: k.owed, from: len(backs)}
			backs = k.backs(backs, key, now, tr.store)
			if kb.to = len(backs); kb.to == kb.from { // all drained: nothing to tell Redis
				k.owed = 0
				tr.owing.Add(-1)
				continue
			}
			keys = append(keys, kb)
		}
		sh.mu.Unlock()
	}
	if len(backs) == 0 {
		return true, nil
	}
	tr.write(ctx, backs)
	answered := false
	var first error
	for _, b := range backs {
		var re redis.Error
		answered = answered || b.Op.Err == nil || errors.As(b.Op.Err, &re)
		if b.Op.Err != nil && first == nil {
			first = b.Op.Err
		}
	}
	for _, kb := range keys {
		var err error
		for _, b := range backs[kb.from:kb.to] {
			if err = b.Op.Err; err != nil {
				break
			}
		}
		tr.settle(kb.key, kb.owed, err, answered)
	}
	return answered, first
}

// keyBack is a key's write-backs: backs[from:to], built when it owed owed units.
type keyBack struct {
	key      string
	owed     int64
	from, to int
}

// backs appends the write-backs of k's owed units (key's) at now: only what the node's local
// state still counts, the rest having drained. A sliding algorithm's units go back at the
// times they were admitted (the middle of their eighth of the window), those older than a
// window left out; another's, at once.
func (k *keyTransition) backs(backs []redisstore.Back, key string, now int64, local localStore) []redisstore.Back {
	peek := local.Decide(key, k.local, algos.Request{DryRun: true})
	units := min(k.owed, max(0, k.local.Script().Limit-peek.Remaining))
	w := slidingWindow(k.alg)
	if w < seedParts {
		if units == 0 {
			return backs
		}
		return append(backs, redisstore.Back{Op: &rules.Op{Key: key, Alg: k.alg, Req: algos.Request{Now: now, Cost: units}}, Marker: k.mark})
	}
	if k.parts == nil {
		return backs
	}
	parts := *k.parts
	slices.SortFunc(parts[:], func(a, b part) int { return cmp.Compare(a.from, b.from) })
	span := w / seedParts
	for i, p := range parts {
		at := min(p.from+span/2, now)
		if p.units == 0 || at+w <= now {
			continue
		}
		backs = append(backs, redisstore.Back{Op: &rules.Op{Key: key, Alg: k.alg, Req: algos.Request{Now: now, Cost: p.units, Backdated: true}},
			Marker: k.mark + ":" + strconv.Itoa(i), Ago: now - at})
	}
	return backs
}

// settle books the outcome of key's write-backs, built when it owed owed units: done (those
// units were written back or had drained), or failed with err (counted only when Redis
// answered the call, answered is set: a key's own failure, not the outage's).
func (tr *transitions) settle(key string, owed int64, err error, answered bool) {
	sh := tr.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	k := sh.get(key, false)
	if k == nil || k.owed == 0 {
		return
	}
	switch {
	case err == nil:
		// Units admitted since the call was built stay owed, under a marker of their own.
		k.owed -= min(k.owed, owed)
		k.mark, k.tries, k.parts = tr.marker(tr.epoch.Load()), 0, nil
	case answered:
		if k.tries++; k.tries >= writeBackTries {
			if tr.onGiveUp != nil {
				tr.onGiveUp(key, k.owed, err)
			}
			k.owed = 0
		}
	}
	if k.owed == 0 {
		tr.owing.Add(-1)
	}
}

// transits reports whether op's key carries state across an outage: a FailLocal op that is not
// a lease's (a concurrency limit gives its leases back as requests end), nor of a paced
// algorithm (algos.Paced: warm_up, whose Remaining does not tell its state).
func transits(op *rules.Op) bool {
	if op.OnError != rules.FailLocal || op.Req.Release || op.Req.ID != 0 {
		return false
	}
	if r := op.Rule(); r != nil && r.Leases {
		return false
	}
	alg := op.Alg
	if b, ok := alg.(*rules.Batched); ok {
		alg = b.Algorithm
	}
	if b, ok := alg.(interface{ Inner() algos.Algorithm }); ok {
		alg = b.Inner()
	}
	_, paced := alg.(algos.Paced)
	return !paced
}

// seedParts is how many requests spread a sliding algorithm's seed over its window.
const seedParts = 8

// seed charges cost units to key in local with alg, as a partial request at µs at; spread
// evenly over the window before at for a sliding algorithm.
func seed(local localStore, key string, alg algos.Algorithm, at, cost int64) {
	if cost <= 0 {
		return
	}
	inner := alg
	if b, ok := inner.(interface{ Inner() algos.Algorithm }); ok {
		inner = b.Inner()
	}
	w := slidingWindow(alg)
	if w == 0 {
		local.DecideAt(key, alg, algos.Request{Now: at, Cost: cost, Partial: true})
		return
	}
	done := int64(0)
	for i := int64(1); i <= seedParts; i++ {
		part := cost*i/seedParts - done
		done += part
		if part > 0 {
			local.DecideAt(key, alg, algos.Request{Now: at - w + w*i/seedParts, Cost: part, Partial: true})
		}
	}
}

// slidingWindow returns the window of a sliding algorithm (algos.Sliding, under a ban or a
// batch too), 0 for another.
func slidingWindow(alg algos.Algorithm) int64 {
	if b, ok := alg.(*rules.Batched); ok {
		alg = b.Algorithm
	}
	if b, ok := alg.(interface{ Inner() algos.Algorithm }); ok {
		alg = b.Inner()
	}
	if sl, ok := alg.(algos.Sliding); ok {
		return max(sl.SlidingWindow(), 0)
	}
	return 0
}

// localStore is what the transitions need of Options.Local (*memstore.Store).
type localStore interface {
	Decide(key string, alg algos.Algorithm, r algos.Request) algos.Decision
	DecideAt(key string, alg algos.Algorithm, r algos.Request) algos.Decision
	Reset(key string) bool
}

// mulDivDown returns a × b / c rounded down, for 0 ≤ a ≤ c and b ≥ 0, without overflow.
func mulDivDown(a, b, c int64) int64 {
	if a == c {
		return b
	}
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	q, _ := bits.Div64(hi, lo, uint64(c)) // hi < c as a ≤ c: no panic
	return int64(q)
}

var errTooManyKeys = errors.New("failover: too many keys with units to write back: these units are not written back")
