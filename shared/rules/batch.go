package rules

import (
	"strconv"
	"strings"

	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/conf"
)

// Batched is the algorithm of a cluster rule in batched mode: a node takes the rule's units from
// Redis in batches of Min to Max units (Batching.Alg, pre-debited) and spends them on its own
// within their Batching.Life. A store that does not batch (no store/batch in the stack) decides
// with the embedded algorithm, exactly; so do the fail policies, and it gives the Limit.
type Batched struct {
	algos.Algorithm
	Batching *algos.Batching
	Min, Max int64 // units a node asks for at a time; the batch adapts to its rate in between
}

// MaxBatch is the largest batch a rule may ask for.
const MaxBatch = 1_000_000

// decodeBatch reads the rule's batch object and wraps r.Alg in Batched.
func (r *Rule) decodeBatch(o *conf.Obj) {
	if !o.Has("batch") {
		return
	}
	bo := o.Obj("batch")
	if o.Failed("batch") {
		return
	}
	bo.Require("max")
	hi := bo.Int("max", 1, 1, MaxBatch)
	lo := bo.Int("min", 1, 1, MaxBatch)
	age := bo.Duration("max_age", 0, 0, algos.MaxSpan)
	bo.Done()
	switch {
	case lo > hi && !bo.Failed("min") && !bo.Failed("max"):
		bo.Fail("min", "must be at most max ("+strconv.FormatInt(hi, 10)+"), got "+strconv.FormatInt(lo, 10))
	case r.Mode != Cluster:
		o.Fail("batch", "applies only to cluster mode: a local rule already decides in this process")
	case r.Action == Delay:
		o.Fail("batch", "cannot be combined with action delay: a node spending batched units cannot hold requests")
	case r.Alg == nil:
		return // the limit's errors are reported already
	default:
		l, ok := r.Alg.(algos.Batcher)
		if !ok {
			o.Fail("batch", r.Algorithm+" cannot be batched (batched mode takes "+strings.Join(AlgorithmsWhere(AlgorithmKind.Batches), ", ")+")")
			return
		}
		batching, err := l.Batching(age)
		if err != nil {
			switch pe, ok := err.(*algos.ParamError); {
			case ok && pe.Param == "max_age":
				bo.Fail("max_age", pe.Reason)
			case ok:
				o.Fail("batch", r.Algorithm+" cannot be batched: "+pe.Param+" "+pe.Reason)
			default:
				o.Fail("batch", err.Error())
			}
			return
		}
		r.Alg = &Batched{Algorithm: r.Alg, Batching: batching, Min: lo, Max: hi}
	}
}
