// Package batch is the batched cluster mode: a node takes a rule's units from Redis in
// batches, pre-debited by a partial request of the rule's batch algorithm, and spends them on its
// own, so that Redis sees one call per batch instead of one per request.
//
// Nothing is ever over-admitted: every unit spent was granted by Redis, and is spent within its
// batch's life (algos.Batching), for which the batch algorithm makes up. The cost is
// under-admission: units a node holds but does not spend in time expire unused, and the batch
// algorithms of the sliding log and the buckets are a little stricter than the rule (see
// algos.Batching).
//
// Units that expire unspent, and those held when the node stops (Close), are given back to Redis
// where the batch algorithm can take them back safely (algos.Batching.Refund: the fixed window,
// while the window of their grant lasts, and the sliding log): the node drops them first, so it
// never spends a unit it gave back. Expiry is seen lazily, when a request touches the key or a
// full shard is swept; the refunds then wait for the node's next round trip to Redis, for any key,
// and go in front of its calls in the same pipeline, so they cost no round trip of their own; or
// Flush, which a front end calls every second, sweeps every key and sends them at once. (A
// Redis that has not loaded the refund script yet runs it after the other calls of that round
// trip: the units are back for the next batch instead.)
//
// The batch a node asks for adapts to the rate the node spends a key's units at: about the units
// it spends in a batch life (three quarters of that where units cannot go back, as a bucket's),
// within the rule's [Min, Max]. When the limit is scarce (Redis refused a batch, or granted less
// than asked for), the node asks again only after half a batch life (or the refusal's
// RetryAfter, if longer; at most a batch life) and refuses meanwhile, so that an exhausted key
// costs no call per request either: each call then takes what came back.
package batch

import (
	"context"
	"fmt"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/rules"
)

// Options tune a Store.
type Options struct {
	// Now is this node's clock in µs; default a monotonic clock, which a wall clock set back or
	// forward does not move. Batch lives are measured on it, from just before the round trip that
	// granted a batch, so they never run long. An injected clock that steps forward makes units
	// expire early; one that steps back (by more than stepBack) ends every unit held, as their
	// lives were measured on the old time: either way the node under-admits, never over.
	Now func() int64
	// MaxKeys bounds the keys the node holds units of; default 100,000. When it is reached, keys
	// whose units have expired are dropped, and a new key that still finds no room is decided
	// in Redis request by request, exactly.
	MaxKeys int
}

// Store decides the ops of batched rules (rules.Op.Batch) from batched units, asking the store
// behind it (redisstore) for a batch when a key's units run out; every other op goes there as it
// is. It implements rules.Store, is safe for concurrent use and starts no goroutines.
type Store struct {
	next   rules.Store
	clock  func() int64
	last   atomic.Int64 // the latest clock reading
	epoch  atomic.Int64 // steps back of the clock seen; units of an earlier epoch are over
	seed   maphash.Seed
	perMax int
	shards [shards]shard
	stats  counters
	closed atomic.Bool // Close was called: every call goes to Redis as it is

	retMu sync.Mutex // guards rets; taken under a shard's mutex, never the other way round
	rets  []rules.Op // refunds of units dropped unspent, for the next round trip
}

// maxRefunds bounds the refunds that go in front of one round trip, so that a node that had many
// keys expire at once does not make one request wait for all of them.
const maxRefunds = 64

// unreturnable scales the batch of an algorithm whose units cannot go back to Redis (the
// buckets, the sliding window): three quarters of what the node spends in a batch life, so that less is left to
// expire when its rate falls, for a third more round trips; a half left too few batched calls
// for the cut TestCutsRedisCalls asks (measured with dianasim: docs/redis.md, "Tuning, as
// measured").
const unreturnable = 0.75

const shards = 32

type shard struct {
	mu    sync.Mutex
	pools map[string]*pool
	swept int64 // µs: the last sweep, which a full shard runs at most every sweepEvery
}

// sweepEvery keeps a flood of new keys on a full shard from sweeping it on every request.
const sweepEvery = 100_000

// pool is what a node holds of one key. Fields are guarded by the shard's mutex.
type pool struct {
	key      string
	batching *algos.Batching // of the rule whose units these are, for refunds
	units    int64           // batched units left: the sum of held
	held     []grant         // the grants the units came from, oldest first: spent in that order
	until    int64           // µs: units left then have expired
	deny     int64           // µs: until then the node refuses the key without asking (scarcity)
	denied   algos.Decision  // Redis's answer that said so
	deniedAt int64           // µs: when it was asked for
	grant    algos.Decision  // the last grant, for the headers of local decisions
	granted  int64           // µs: when it was asked for
	spent    int64           // units spent since `since`, to measure the rate
	since    int64
	rate     float64 // units per µs, smoothed over batches
	asking   bool    // a batch is being asked for: other requests go to Redis one by one
	epoch    int64   // the clock's epoch when the units and the refusal were had
}

// grant is what is left of one batch: units granted at (Redis's time, which the partial
// request's Req.Now holds once granted, see rules.Op; 0: unknown, so they cannot be given back).
type grant struct{ at, units int64 }

// Stats counts what a Store did since it was made.
type Stats struct {
	Batches  int64 // round trips that asked for a batch
	Granted  int64 // units Redis granted in batches
	Spent    int64 // batched units spent (requests decided without a round trip, by cost)
	Expired  int64 // batched units that expired unspent, or were held when the Store closed
	Returned int64 // of those, the units Redis took back (refunds)
	Direct   int64 // calls sent to Redis one by one (not batched, or no batch could be asked)
	Refusals int64 // requests denied from a remembered refusal, without a round trip
}

type counters struct{ batches, granted, spent, expired, returned, direct, refusals atomic.Int64 }

// New returns a Store in front of next.
func New(next rules.Store, o Options) *Store {
	if o.Now == nil {
		start := time.Now()
		o.Now = func() int64 { return time.Since(start).Microseconds() }
	}
	if o.MaxKeys <= 0 {
		o.MaxKeys = 100_000
	}
	s := &Store{next: next, clock: o.Now, seed: maphash.MakeSeed(), perMax: max(1, o.MaxKeys/shards)}
	for i := range s.shards {
		s.shards[i].pools = map[string]*pool{}
	}
	return s
}

// stepBack is how far a clock reading may fall behind the latest before it counts as a step back:
// readings made concurrently reach the store in any order. A step back of less than that is not
// told from them, and lengthens lives by at most that much.
const stepBack = algos.Millisecond

// now reads the clock. A reading more than stepBack earlier than the latest starts a new epoch,
// which ends every unit held.
func (s *Store) now() int64 {
	t := s.clock()
	for {
		last := s.last.Load()
		switch {
		case t < last-stepBack:
			if s.last.CompareAndSwap(last, t) {
				s.epoch.Add(1)
				return t
			}
		case t > last:
			if s.last.CompareAndSwap(last, t) {
				return t
			}
		default:
			return t
		}
	}
}

// Stats returns the Store's counters.
func (s *Store) Stats() Stats {
	c := &s.stats
	return Stats{Batches: c.batches.Load(), Granted: c.granted.Load(), Spent: c.spent.Load(),
		Expired: c.expired.Load(), Returned: c.returned.Load(), Direct: c.direct.Load(), Refusals: c.refusals.Load()}
}

// Decide decides ops: those of batched rules from the units this node holds when it can (no
// round trip), the others in one round trip to the store behind it, in which the keys that ran
// out ask for a new batch. A dry run is answered from the held units without taking them. A
// batch that could not be granted (an error) leaves the op's Err for the caller's fail policy.
func (s *Store) Decide(ctx context.Context, ops []*rules.Op) { s.DecideHeld(ctx, ops) }

// DecideHeld is Decide, and returns how many ops it answered from what the node holds (units,
// a remembered refusal) without a round trip: those say nothing about Redis, and
// store/failover's breaker does not count them.
func (s *Store) DecideHeld(ctx context.Context, ops []*rules.Op) (held int) {
	if !slices.ContainsFunc(ops, batched) {
		// No batched rule: the ops go as they are.
		s.next.Decide(ctx, ops)
		s.stats.direct.Add(int64(len(ops)))
		return 0
	}
	var trips []trip // the ops that need a round trip
	for _, op := range ops {
		t := trip{op: op}
		if batched(op) {
			op.Dec, op.Err = algos.Decision{}, nil
			want, local := s.local(op, nil)
			switch {
			case local:
				held++
				continue
			case want > 0:
				t.ask, t.own = true, rules.Op{Key: op.Key, Alg: op.Batch.Batching.Alg,
					Req: algos.Request{Now: op.Req.Now, Cost: want, Partial: true}}
			default:
				// Another request of this node is asking for the key's batch: decide this one
				// exactly, as a lease spent at once.
				t.own = rules.Op{Key: op.Key, Alg: op.Batch.Batching.Alg, Req: op.Req}
			}
		}
		if trips == nil {
			trips = make([]trip, 0, len(ops))
		}
		trips = append(trips, t)
	}
	if len(trips) == 0 {
		return held
	}
	send := make([]*rules.Op, len(trips))
	asked := 0
	for j := range trips {
		send[j] = trips[j].sent()
		if trips[j].ask {
			asked++
		}
	}
	t0 := s.now()
	e0 := s.epoch.Load()
	send = s.sendWithRefunds(ctx, send)
	s.stats.direct.Add(int64(len(send) - asked))
	for j := range trips {
		if t := &trips[j]; send[j] != t.op {
			t.op.Dec, t.op.Err = send[j].Dec, send[j].Err
		}
	}
	for j := range trips {
		if t := &trips[j]; t.ask {
			s.granted(t.op, send[j], t0, e0, nil)
		}
	}
	for j := range trips {
		if op := trips[j].op; batched(op) && send[j].Err == nil && !send[j].Req.Partial {
			op.Dec.Limit = op.Alg.Script().Limit // decided directly with the batch algorithm
		}
	}
	return held
}

// trip is an op that needs a round trip, and what is sent for it.
type trip struct {
	op  *rules.Op // the caller's
	own rules.Op  // sent instead of op for a batched rule: a batch asked for, or an exact decision
	ask bool      // own asks for a batch
}

// sent is the op the round trip decides for t.
func (t *trip) sent() *rules.Op {
	if t.own.Alg != nil {
		return &t.own
	}
	return t.op
}

// sendWithRefunds decides send in one round trip, behind the refunds waiting for one (at most
// maxRefunds), and returns send as decided.
func (s *Store) sendWithRefunds(ctx context.Context, send []*rules.Op) []*rules.Op {
	s.retMu.Lock()
	n := min(len(s.rets), maxRefunds)
	if n == 0 {
		s.retMu.Unlock()
		s.next.Decide(ctx, send)
		return send
	}
	rets := slices.Clone(s.rets[:n])
	s.rets = s.rets[:copy(s.rets, s.rets[n:])]
	s.retMu.Unlock()
	now := s.now() // the time of a test's or simulator's Redis (CallerClock); Redis TIME otherwise
	all := make([]*rules.Op, 0, n+len(send))
	for i := range rets {
		rets[i].Req.Now = now
		all = append(all, &rets[i])
	}
	all = append(all, send...)
	s.next.Decide(ctx, all)
	s.refunded(rets)
	return all[n:]
}

// refunded counts the units that refunds took back. A refund that failed is not sent again: its
// units are lost to the cluster (under-admission), as they would have been without refunds.
func (s *Store) refunded(rets []rules.Op) int {
	failed := 0
	for i := range rets {
		if rets[i].Err != nil {
			failed++
			continue
		}
		s.stats.returned.Add(rets[i].Dec.Granted)
	}
	return failed
}

// Flush gives back to Redis, in one round trip of its own, the units that expired unspent since
// the last round trip, including those of keys no request touched since (a sweep of every key
// held). Refunds otherwise wait for the node's next round trip; a node whose traffic stops would
// keep them past the end of their window, when they can no longer go back. dianad calls it every
// second. It returns an error if a refund could not be sent.
func (s *Store) Flush(ctx context.Context) error {
	s.eachPool(s.expire)
	return s.sendRefunds(ctx)
}

// eachPool applies f to every key's pool at the store's time, one shard locked at a time.
func (s *Store) eachPool(f func(p *pool, now int64)) {
	now := s.now()
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		for _, p := range sh.pools {
			f(p, now)
		}
		sh.mu.Unlock()
	}
}

// sendRefunds sends every refund waiting, in round trips of its own.
func (s *Store) sendRefunds(ctx context.Context) error {
	s.retMu.Lock()
	rets := s.rets
	s.rets = nil
	s.retMu.Unlock()
	failed := 0
	now := s.now()
	for i := range rets {
		rets[i].Req.Now = now
	}
	ops := make([]*rules.Op, 0, min(len(rets), 256))
	for len(rets) > 0 {
		n := min(len(rets), 256)
		ops = ops[:0]
		for i := range rets[:n] {
			ops = append(ops, &rets[i])
		}
		s.next.Decide(ctx, ops)
		failed += s.refunded(rets[:n])
		rets = rets[n:]
	}
	if failed > 0 {
		return fmt.Errorf("batch: %d refunds of unspent units failed; their units are lost until their windows end", failed)
	}
	return nil
}

// Close gives back to Redis every unit the Store holds and every refund still waiting, in round
// trips of its own (bounded by ctx), and makes the Store send every later call to Redis as it is,
// unbatched. A node calls it when it stops. Units granted to calls that race with Close are not
// given back: they expire unspent. It returns an error if a refund could not be sent.
func (s *Store) Close(ctx context.Context) error {
	s.closed.Store(true)
	s.eachPool(s.drop)
	return s.sendRefunds(ctx)
}

// batched reports whether op is a decision of a batched rule.
func batched(op *rules.Op) bool { return op.Batch != nil && !op.Req.Release }

// local answers c from the units held for its key, if it can. Otherwise it returns the batch to
// ask for (0 when another request is asking already), and marks the key as asking.
func (s *Store) local(c *rules.Op, took *taking) (want int64, done bool) {
	b := c.Batch
	sh := s.shard(c.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	now := s.now()
	n := c.Req.Bounded().Cost
	if s.closed.Load() {
		return 0, false // decided in Redis, one by one
	}
	p := sh.pools[c.Key]
	if p == nil {
		if len(sh.pools) >= s.perMax && (now-sh.swept < sweepEvery || s.sweep(sh, now) == 0) {
			return 0, false // no room: decided in Redis, one by one
		}
		p = &pool{key: c.Key, batching: b.Batching, since: now, epoch: s.epoch.Load()}
		sh.pools[c.Key] = p
	}
	s.expire(p, now)
	switch {
	case p.units >= n:
		s.spend(p, c, n, now, took)
		return 0, true
	case now < p.deny:
		c.Dec = p.denied
		c.Dec.Remaining = p.units
		c.Dec.RetryAfter = p.deny - now
		c.Dec.ResetAfter = max(c.Dec.ResetAfter-(now-p.deniedAt), c.Dec.RetryAfter)
		s.stats.refusals.Add(1)
		return 0, true
	case p.asking:
		return 0, false
	}
	p.asking = true
	// The rate (units per µs) since the last batch, averaged with the one before; the batch is
	// what that rate spends in the life the batch would have (less near a window's end, where
	// units left unspent would be lost to every node), or three quarters of it where unspent units
	// cannot go back to Redis (unreturnable). (Floating point: a heuristic, safe from overflow.)
	if el := now - p.since; el > 0 {
		r := float64(p.spent) / float64(el)
		if p.rate > 0 {
			r = (r + p.rate) / 2
		}
		p.rate, p.spent, p.since = r, 0, now
	}
	want = b.Max
	w := p.rate * float64(b.Batching.Left(p.grant, now-p.granted))
	if !b.Batching.Refunds() {
		w *= unreturnable
	}
	if w < float64(b.Max) {
		want = max(int64(w), b.Min)
	}
	return max(want, n), false
}

// granted records the batch answer a for op c, asked for at t0 in epoch e0, and decides c
// from it.
func (s *Store) granted(c, a *rules.Op, t0, e0 int64, took *taking) {
	b := c.Batch
	sh := s.shard(c.Key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	p := sh.pools[c.Key]
	if p == nil { // swept meanwhile
		p = &pool{key: c.Key, batching: b.Batching, since: t0, epoch: e0}
		sh.pools[c.Key] = p
	}
	p.asking = false
	if a.Err != nil {
		return // the caller's fail policy decides
	}
	now := s.now()
	s.stats.batches.Add(1)
	d := a.Dec
	n := c.Req.Bounded().Cost
	s.expire(p, now)
	p.epoch = e0 // units granted across a step back are over at once
	if g := d.Granted; g > 0 {
		s.stats.granted.Add(g)
		until := t0 + b.Batching.Life(d)
		if p.units > 0 {
			until = min(until, p.until) // older units keep their own end
		}
		p.units += g
		p.held = append(p.held, grant{a.Req.Now, g})
		p.batching = b.Batching
		p.until, p.grant, p.granted = until, d, t0
	}
	if d.Granted < a.Req.Cost && d.RetryAfter != algos.Never {
		// The limit is scarce: Redis refused the batch or had fewer units than asked for. Asking
		// again as each unit comes back would cost a call per unit; the node waits half a lease
		// life (or the refusal's retry-after, if longer; at most a batch life, and never past
		// the time the whole limit is back, such as a fixed window's end), and its next call
		// takes what came back meanwhile.
		hold := min(max(d.RetryAfter, b.Batching.MaxAge/2), b.Batching.MaxAge)
		if d.ResetAfter > 0 {
			hold = min(hold, max(d.ResetAfter, d.RetryAfter))
		}
		p.deny = t0 + hold
		p.denied, p.deniedAt = d, t0
		p.denied.Allowed, p.denied.Granted, p.denied.Delay = false, 0, 0
		p.denied.Limit = c.Alg.Script().Limit
	}
	// The request that asked is decided by the grant as exact mode decides it, where Redis's
	// answer also arrives a round trip later: it takes units just granted even if their batch
	// life ended in flight (a window that closed meanwhile); the others then expire.
	if p.units >= n {
		s.spend(p, c, n, now, took)
		s.expire(p, now)
		return
	}
	s.expire(p, now)
	c.Dec = d
	c.Dec.Allowed, c.Dec.Granted, c.Dec.Delay = false, 0, 0
	c.Dec.Limit = c.Alg.Script().Limit
	c.Dec.Remaining = p.units
	if now < p.deny {
		c.Dec.RetryAfter = p.deny - now
		c.Dec.ResetAfter = max(c.Dec.ResetAfter, c.Dec.RetryAfter)
	}
}

// spend takes n held units for c (unless it is a dry run) and sets its decision; took, if not
// nil, records what it took, for giveBack.
func (s *Store) spend(p *pool, c *rules.Op, n, now int64, took *taking) {
	if !c.Req.DryRun {
		if took != nil {
			*took = taking{p: p, until: p.until, epoch: p.epoch, from: took.from[:0]}
		}
		p.units -= n
		p.spent += n
		s.stats.spent.Add(n)
		for left := n; left > 0; { // the oldest grant's units first
			k := min(left, p.held[0].units)
			if took != nil {
				took.from = append(took.from, grant{p.held[0].at, k})
			}
			p.held[0].units -= k
			left -= k
			if p.held[0].units == 0 {
				p.held = p.held[:copy(p.held, p.held[1:])]
			}
		}
	}
	limit := c.Alg.Script().Limit
	c.Dec = algos.Decision{
		Allowed:    true,
		Limit:      limit,
		Remaining:  min(limit, p.units+p.grant.Remaining),
		ResetAfter: max(0, p.grant.ResetAfter-(now-p.granted)),
		Granted:    n,
	}
	if c.Req.DryRun {
		c.Dec.Granted = 0
	}
}

// expire drops p's units if their life is over, and its refusal too if the clock stepped back
// since it was had.
func (s *Store) expire(p *pool, now int64) {
	stepped := p.epoch != s.epoch.Load()
	if p.units > 0 && (now >= p.until || stepped) {
		s.drop(p, now)
	}
	if stepped {
		p.deny = 0
	}
}

// drop ends every unit p holds, and queues the refunds of those the batch algorithm can take
// back for the next round trip. (A refund is sound whenever it reaches Redis: Redis checks it on
// its own clock; the node never spends the units again.)
func (s *Store) drop(p *pool, now int64) {
	if p.units == 0 {
		return
	}
	s.stats.expired.Add(p.units)
	p.units = 0
	s.retMu.Lock()
	for _, g := range p.held {
		if g.at <= 0 || g.units <= 0 {
			continue
		}
		if rf := p.batching.Refund(g.at); rf != nil {
			s.rets = append(s.rets, rules.Op{Key: p.key, Alg: rf, Req: algos.Request{Now: now, Cost: g.units}})
		}
	}
	s.retMu.Unlock()
	p.held = p.held[:0]
}

// sweep drops the pools of sh that hold nothing worth keeping at now, and returns how many.
func (s *Store) sweep(sh *shard, now int64) int {
	sh.swept = now
	n := 0
	for k, p := range sh.pools {
		s.expire(p, now)
		if p.units == 0 && now >= p.deny && !p.asking {
			delete(sh.pools, k)
			n++
		}
	}
	return n
}

func (s *Store) shard(key string) *shard {
	return &s.shards[maphash.String(s.seed, key)%shards]
}
