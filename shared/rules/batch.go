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
	b, ok := readBatch(o)
	switch {
	case !ok:
	case r.Mode != Cluster:
		o.Fail("batch", "applies only to cluster mode: a local rule already decides in this process")
	case r.Action == Delay:
		o.Fail("batch", "cannot be combined with action delay: a node spending batched units cannot hold requests")
	case r.Alg == nil:
		// the limit's errors are reported already
	default:
		if a := b.wrap(o, r.Alg, r.Algorithm); a != nil {
			r.Alg = a
		}
	}
}

// Batch reads the batch object of o, if it has one, and returns alg (of the algorithm named
// name) in batched mode, as a rule's batch field does; else, or when the object is invalid (the
// error recorded on o), alg itself. For configs other than rules (the rate limit service's
// descriptors), in cluster mode.
func Batch(o *conf.Obj, alg algos.Algorithm, name string) algos.Algorithm {
	b, ok := readBatch(o)
	if !ok || alg == nil {
		return alg
	}
	if a := b.wrap(o, alg, name); a != nil {
		return a
	}
	return alg
}

// batchFields are a batch object's fields.
type batchFields struct {
	bo       *conf.Obj
	min, max int64
	age      int64
}

// readBatch reads o's batch object: false when o has none or it is invalid.
func readBatch(o *conf.Obj) (batchFields, bool) {
	if !o.Has("batch") {
		return batchFields{}, false
	}
	bo := o.Obj("batch")
	if o.Failed("batch") {
		return batchFields{}, false
	}
	bo.Require("max")
	b := batchFields{bo: bo, max: bo.Int("max", 1, 1, MaxBatch), min: bo.Int("min", 1, 1, MaxBatch), age: bo.Duration("max_age", 0, 0, algos.MaxSpan)}
	bo.Done()
	if b.min > b.max && !bo.Failed("min") && !bo.Failed("max") {
		bo.Fail("min", "must be at most max ("+strconv.FormatInt(b.max, 10)+"), got "+strconv.FormatInt(b.min, 10))
		return b, false
	}
	return b, true
}

// wrap returns alg (named name) batched, or nil with the reason recorded on o.
func (b batchFields) wrap(o *conf.Obj, alg algos.Algorithm, name string) algos.Algorithm {
	l, ok := alg.(algos.Batcher)
	if !ok {
		o.Fail("batch", name+" cannot be batched (batched mode takes "+strings.Join(AlgorithmsWhere(AlgorithmKind.Batches), ", ")+")")
		return nil
	}
	batching, err := l.Batching(b.age)
	if err != nil {
		switch pe, ok := err.(*algos.ParamError); {
		case ok && pe.Param == "max_age":
			b.bo.Fail("max_age", pe.Reason)
		case ok:
			o.Fail("batch", name+" cannot be batched: "+pe.Param+" "+pe.Reason)
		default:
			o.Fail("batch", err.Error())
		}
		return nil
	}
	return &Batched{Algorithm: alg, Batching: batching, Min: b.min, Max: b.max}
}
