package sim

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/conf"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/batch"
	"github.com/diana-gw/diana/store/failover"
	"github.com/diana-gw/diana/store/memstore"
	"github.com/diana-gw/diana/store/redisstore"
)

// Mode is how the nodes of a simulated deployment decide: it builds one rules.Store per node.
type Mode struct {
	Name  string
	About string
	// Split divides each algorithm's limit by the node count on every node.
	Split bool
	// Supports reports whether the mode runs the algorithm (nil: every one).
	Supports func(Algo) bool
	// Fallback makes each op the op of the algorithm's cluster rule with on_error: local over
	// the trace's nodes (Algo.Rule, rules.NewOp): its local fallback is the limit divided by the
	// node count, and stores that learn per rule (failover.Shares) know its rule.
	Fallback bool
	// Redis marks a mode whose stores keep state in Redis, whose keys expire on Redis's clock.
	Redis bool
	// Outage, if set, is when Redis cannot be reached: from Outage[0] to Outage[1] of each
	// trace's span (fractions).
	Outage *[2]float64
	// Wrap, if set, turns the algorithm a node decides with into what the mode's stores take
	// (batched mode: a rules.Batched).
	Wrap func(algos.Algorithm) (algos.Algorithm, error)
	// Stores returns one store per node of t for one run, fresh and independent of every
	// other run's. run is unique per run (it names the trace, the algorithm and the mode); now
	// is the run's virtual clock in µs; a mode that calls Redis counts its calls in c. A store
	// that is a Ticker is ticked every virtual second.
	Stores func(run string, t *Trace, now func() int64, c *Calls) ([]rules.Store, error)
}

// outages returns when Redis cannot be reached in m for t: t.Outages, else m.Outage's
// fractions of t's span; nil when m has no outage.
func (m Mode) outages(t *Trace) [][2]int64 {
	if m.Outage == nil {
		return nil
	}
	if t.Outages != nil {
		return t.Outages
	}
	span := float64(t.End - t.Start)
	return [][2]int64{{t.Start + int64(m.Outage[0]*span), t.Start + int64(m.Outage[1]*span)}}
}

// Ticker is a node's store with work to do as virtual time passes, as a node does in the
// background. A run calls Tick of every node, in node order, at each whole virtual second from
// the trace's start (the first one second in) up to its last request, before the requests of
// that instant, with the virtual clock at that second.
type Ticker interface {
	Tick(ctx context.Context) error
}

// Calls counts what a mode sent to Redis.
type Calls struct {
	Scripts    atomic.Int64 // script calls
	RoundTrips atomic.Int64 // round trips (pipelines of script calls)
}

// LocalFull is local mode as it is often first deployed: every node keeps its own state in
// process memory and enforces the full limit, so n nodes admit up to n times the limit.
func LocalFull() Mode {
	return Mode{Name: "local-full", About: "each node on its own, full limit", Stores: localStores}
}

// LocalSplit is local mode with the usual advice: every node enforces the limit divided by the
// node count. It admits the limit only when every node sees the same share of every client.
func LocalSplit() Mode {
	return Mode{Name: "local-split", About: "each node on its own, limit / nodes", Split: true, Stores: localStores}
}

func localStores(_ string, t *Trace, now func() int64, _ *Calls) ([]rules.Store, error) {
	ss := make([]rules.Store, t.Nodes)
	for i := range ss {
		ss[i] = rules.Each(memstore.New(memstore.Options{Clock: now}).Decide)
	}
	return ss, nil
}

// Cluster is cluster mode: every node decides each request in the Redis that c reaches, one
// script call per request. The scripts take the time from Request.Now (redisstore's
// CallerClock), the virtual clock of the run.
func Cluster(c redis.UniversalClient) Mode {
	return Mode{Name: "cluster", About: "every request decided in Redis", Redis: true,
		Stores: func(run string, t *Trace, _ func() int64, calls *Calls) ([]rules.Store, error) {
			shared := NewCounted(c, "diana-sim:"+run+":", calls)
			ss := make([]rules.Store, t.Nodes)
			for i := range ss {
				ss[i] = shared
			}
			return ss, nil
		}}
}

// BatchOptions configure batched mode: what each rule's batch block would say.
type BatchOptions struct {
	Min    int64 `json:"min"`        // units a node asks for at a time
	Max    int64 `json:"max"`        // units a node asks for at a time
	MaxAge int64 `json:"max_age_us"` // µs a batched unit may be spent after its grant; 0: the algorithm's default
}

// Batched is batched mode: every node runs a store/batch.Store in front of the Redis that c
// reaches, taking batches of units (pre-debited by a partial request) and spending them on its
// own. It runs the algorithms that implement algos.Batcher.
func Batched(c redis.UniversalClient, o BatchOptions) Mode {
	about := fmt.Sprintf("batches of %d to %d units from Redis", o.Min, o.Max)
	if o.MaxAge > 0 {
		about += ", spent within " + duration(o.MaxAge)
	}
	return Mode{Name: "batched", About: about, Redis: true,
		Supports: Algo.Batchable,
		Wrap: func(alg algos.Algorithm) (algos.Algorithm, error) {
			l, ok := alg.(algos.Batcher)
			if !ok {
				return nil, fmt.Errorf("%s cannot be batched", alg.Script().Name)
			}
			b, err := l.Batching(o.MaxAge)
			if err != nil {
				return nil, err
			}
			return &rules.Batched{Algorithm: alg, Batching: b, Min: o.Min, Max: o.Max}, nil
		},
		Stores: func(run string, t *Trace, now func() int64, calls *Calls) ([]rules.Store, error) {
			shared := NewCounted(c, "diana-sim:"+run+":", calls)
			ss := make([]rules.Store, t.Nodes)
			for i := range ss {
				ss[i] = batchNode{batch.New(shared, batch.Options{Now: now})}
			}
			return ss, nil
		}}
}

// Failover is cluster mode through an outage: every node decides in the Redis that c reaches
// through store/failover, as dianad does, with on_error: local (Algo.Rule); Redis cannot be
// reached from outage[0] to outage[1] (fractions of the trace's span; a trace's own Outages
// instead, if it has them), and meanwhile each node
// decides alone with its fallback: the limit at the node's share of the rule's traffic learned
// while Redis answered, with failover.Headroom (failover.Shares, as store/stack wires it), or
// the limit divided by the node count without history. Each node exchanges its counts with the
// others through Redis every virtual second while Redis is reachable (Tick), on the virtual
// clock. The breaker never opens (every call during the outage fails at once) and the
// round-trip timeout is a minute, so that which requests fall back depends on virtual time
// only, not on the machine's speed. It runs the algorithms a config can name (Algo.Limit).
func Failover(c redis.UniversalClient, outage [2]float64) Mode {
	m := Mode{Name: "failover", Redis: true, Fallback: true, Outage: &outage,
		About: fmt.Sprintf("cluster mode, but Redis is unreachable from %.0f%% to %.0f%% of the trace (or when the trace says); meanwhile each node decides alone (on_error: local) "+
			"at its share of the traffic learned while Redis answered, +%.0f%% headroom (limit / nodes without history)",
			100*outage[0], 100*outage[1], 100*failover.Headroom),
		Supports: func(a Algo) bool { return a.Limit != "" },
	}
	m.Stores = func(run string, t *Trace, now func() int64, calls *Calls) ([]rules.Store, error) {
		prefix := "diana-sim:" + run + ":"
		down := &unreachable{next: NewCounted(c, prefix, calls), now: now, outages: m.outages(t)}
		clock := func() time.Time { return time.UnixMicro(now()) }
		ss := make([]rules.Store, t.Nodes)
		for i := range ss {
			sh := failover.NewShares(c, failover.ShareOptions{Prefix: prefix, Node: "node-" + strconv.Itoa(i), Every: shareEvery,
				Manual: true, Now: clock})
			ss[i] = &sharingNode{
				Store: failover.New(down, failover.Options{Timeout: time.Minute, Failures: 1 << 30,
					Local: memstore.New(memstore.Options{Clock: now}), Shares: sh, WriteBack: down.WriteBack, Clock: now}),
				shares: sh, down: down}
		}
		return ss, nil
	}
	return m
}

// shareEvery is the interval of the exchange of shares: the product's (failover.ShareOptions'
// default), and the virtual second a run ticks at.
const shareEvery = time.Second

// sharingNode is a failover node that exchanges its shares with the others when ticked.
type sharingNode struct {
	*failover.Store
	shares *failover.Shares
	down   *unreachable
}

// Tick exchanges the node's counts with the others' through Redis, unless Redis is
// unreachable. The shares go with the virtual time, which keeps their hash in Redis an hour
// past its last write (failover.Shares): however slowly the replay runs, none expires early.
func (n *sharingNode) Tick(ctx context.Context) error {
	if !n.down.reachable() {
		return nil
	}
	return n.shares.Sync(ctx)
}

// Rule decodes the rule a config gives a in failover mode: named a.Name, in cluster mode with
// on_error: local over nodes nodes, limited by a.Limit.
func (a Algo) Rule(nodes int) (*rules.Rule, error) {
	doc := fmt.Sprintf(`{"name": %q, "mode": "cluster", "on_error": "local", "nodes": %d, "limit": {%s}}`, a.Name, nodes, a.Limit)
	v, err := conf.ParseJSON([]byte(doc))
	if err != nil {
		return nil, fmt.Errorf("sim: %s: the rule is not JSON: %w", a.Name, err)
	}
	errs := &conf.Errors{Source: "the rule of " + a.Name}
	r := rules.DecodeRule(conf.Read(v, errs))
	if err := errs.Err(); err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	return r, nil
}

// errOutage is the error of every call made while Redis is unreachable.
var errOutage = errors.New("sim: Redis unreachable (simulated outage)")

// unreachable fails every call made in one of its outages, [from, to) of virtual time, without
// sending it.
type unreachable struct {
	next    *Counted
	now     func() int64
	outages [][2]int64
}

// reachable reports whether Redis can be reached at the virtual time now.
func (u *unreachable) reachable() bool {
	return phaseOf(u.now(), u.outages) != phaseDuring
}

// WriteBack writes back as Counted does, unless Redis is unreachable.
func (u *unreachable) WriteBack(ctx context.Context, backs []redisstore.Back) {
	if !u.reachable() {
		for _, b := range backs {
			b.Op.Err = errOutage
		}
		return
	}
	u.next.WriteBack(ctx, backs)
}

func (u *unreachable) Decide(ctx context.Context, ops []*rules.Op) {
	if !u.reachable() {
		for _, op := range ops {
			op.Err = errOutage
		}
		return
	}
	u.next.Decide(ctx, ops)
}

// Counted decides calls in Redis (redisstore, with the caller's clock) and counts them: the
// shared store of the cluster and batched modes.
type Counted struct {
	s     *redisstore.Store
	calls *Calls
}

// NewCounted returns a Counted deciding in c under keys starting with prefix, counting its
// calls in calls.
func NewCounted(c redis.UniversalClient, prefix string, calls *Calls) *Counted {
	return &Counted{s: redisstore.New(c, redisstore.Options{Prefix: prefix, CallerClock: true}), calls: calls}
}

// Decide decides ops in one round trip (redisstore.Store.Decide).
func (c *Counted) Decide(ctx context.Context, ops []*rules.Op) {
	if len(ops) == 0 {
		return
	}
	c.s.Decide(ctx, ops)
	c.calls.RoundTrips.Add(1)
	c.calls.Scripts.Add(int64(len(ops)))
}

// WriteBack writes back in one round trip (redisstore.Store.WriteBack), counting its calls.
func (c *Counted) WriteBack(ctx context.Context, backs []redisstore.Back) {
	if len(backs) == 0 {
		return
	}
	c.s.WriteBack(ctx, backs)
	c.calls.RoundTrips.Add(1)
	c.calls.Scripts.Add(int64(len(backs)))
}

// batchNode is a batched node: each virtual second it gives back the units that expired unspent
// (batch.Store.Flush), as dianad and the Kong plugin do every second.
type batchNode struct{ *batch.Store }

func (n batchNode) Tick(ctx context.Context) error { return n.Flush(ctx) }

// decideOne decides one request on store as op says, returning whether it was admitted. An
// error is the run's only when the op has no fail policy to answer it.
func decideOne(ctx context.Context, store rules.Store, op rules.Op) (bool, error) {
	store.Decide(ctx, []*rules.Op{&op})
	if op.Err != nil && op.OnError == rules.FailLocal && errors.Is(op.Err, errOutage) {
		return op.Dec.Allowed, nil
	}
	return op.Dec.Allowed, op.Err
}

// KeyLife measures the least time Redis keeps a key the scripts wrote with a caller's time
// (redisstore's CallerClock) past its last write, whatever its virtual TTL: it decides one
// request of a limit whose state lasts 1ms of virtual time and reads the key's remaining time
// to live. The scripts add an hour to such keys' TTLs, for replays in virtual time.
func KeyLife(ctx context.Context, c redis.UniversalClient) (time.Duration, error) {
	alg, err := algos.NewFixedWindow(1, algos.Millisecond)
	if err != nil {
		return 0, err
	}
	s := redisstore.New(c, redisstore.Options{Prefix: "diana-sim:keylife:" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":", CallerClock: true})
	if _, err := s.DecideOne(ctx, "k", alg, algos.Request{Now: start, Cost: 1}); err != nil {
		return 0, fmt.Errorf("sim: measure the life of a key: %w", err)
	}
	key, _ := s.Keys("k")
	ttl, err := c.PTTL(ctx, key).Result()
	if err != nil {
		return 0, fmt.Errorf("sim: measure the life of a key: %w", err)
	}
	if ttl <= 0 {
		return 0, fmt.Errorf("sim: measure the life of a key: %s has no TTL (%s)", key, ttl)
	}
	c.Del(ctx, key)
	return ttl, nil
}
