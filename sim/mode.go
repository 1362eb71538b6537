package sim

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/batch"
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
	// Wrap, if set, turns the algorithm a node decides with into what the mode's stores take
	// (batched mode: a rules.Batched).
	Wrap func(algos.Algorithm) (algos.Algorithm, error)
	// Stores returns one store per node for one run, fresh and independent of every other
	// run's. run is unique per run (it names the trace, the algorithm and the mode); now is the
	// run's virtual clock in µs; a mode that calls Redis counts its calls in c.
	Stores func(run string, nodes int, now func() int64, c *Calls) ([]rules.Store, error)
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

func localStores(_ string, nodes int, now func() int64, _ *Calls) ([]rules.Store, error) {
	ss := make([]rules.Store, nodes)
	for i := range ss {
		ss[i] = rules.Each(memstore.New(memstore.Options{Clock: now}).Decide)
	}
	return ss, nil
}

// Cluster is cluster mode: every node decides each request in the Redis that c reaches, one
// script call per request. The scripts take the time from Request.Now (redisstore's
// CallerClock), the virtual clock of the run.
func Cluster(c redis.UniversalClient) Mode {
	return Mode{Name: "cluster", About: "every request decided in Redis",
		Stores: func(run string, nodes int, _ func() int64, calls *Calls) ([]rules.Store, error) {
			shared := callStore{NewCounted(c, "diana-sim:"+run+":", calls)}
			ss := make([]rules.Store, nodes)
			for i := range ss {
				ss[i] = shared
			}
			return ss, nil
		}}
}

// BatchOptions configure batched mode: what each rule's batch block would say.
type BatchOptions struct {
	Min, Max int64 // units a node asks for at a time
	MaxAge   int64 // µs a batched unit may be spent after its grant; 0: the algorithm's default
}

// Batched is batched mode: every node runs a store/batch.Store in front of the Redis that c
// reaches, taking batches of units (pre-debited by a partial request) and spending them on its
// own. It runs the algorithms that implement algos.Batcher.
func Batched(c redis.UniversalClient, o BatchOptions) Mode {
	about := fmt.Sprintf("batches of %d to %d units from Redis", o.Min, o.Max)
	if o.MaxAge > 0 {
		about += ", spent within " + duration(o.MaxAge)
	}
	return Mode{Name: "batched", About: about,
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
		Stores: func(run string, nodes int, now func() int64, calls *Calls) ([]rules.Store, error) {
			shared := NewCounted(c, "diana-sim:"+run+":", calls)
			ss := make([]rules.Store, nodes)
			for i := range ss {
				ss[i] = callStore{batch.New(shared, batch.Options{Now: now})}
			}
			return ss, nil
		}}
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

// DecideAll decides calls in one round trip (redisstore.Store.DecideAll).
func (c *Counted) DecideAll(ctx context.Context, calls []redisstore.Call) {
	if len(calls) == 0 {
		return
	}
	c.s.DecideAll(ctx, calls)
	c.calls.RoundTrips.Add(1)
	c.calls.Scripts.Add(int64(len(calls)))
}

// backend decides calls: *Counted, or a *batch.Store in front of one.
type backend interface {
	DecideAll(ctx context.Context, calls []redisstore.Call)
}

// callStore adapts a backend to rules.Store.
type callStore struct{ b backend }

func (s callStore) Decide(ctx context.Context, ops []*rules.Op) {
	calls := make([]redisstore.Call, len(ops))
	for i, op := range ops {
		calls[i] = redisstore.Call{Key: op.Key, Alg: op.Alg, Req: op.Req}
	}
	s.b.DecideAll(ctx, calls)
	for i, op := range ops {
		op.Dec, op.Err = calls[i].Dec, calls[i].Err
	}
}

// decideOne decides one request on store, returning whether it was admitted.
func decideOne(ctx context.Context, store rules.Store, key string, alg algos.Algorithm, r algos.Request) (bool, error) {
	op := &rules.Op{Key: key, Alg: alg, Req: r}
	store.Decide(ctx, []*rules.Op{op})
	return op.Dec.Allowed, op.Err
}
