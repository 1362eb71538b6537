package rules

import (
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

// ReadBatch reads the batch object of o, if it has one (nil otherwise, or when it is not an
// object: said so on o).
func ReadBatch(o *conf.Obj) *BatchSpec {
	if !o.Has("batch") {
		return nil
	}
	bo := o.Obj("batch")
	if o.Failed("batch") {
		return nil
	}
	bo.Require("max")
	b := &BatchSpec{Max: bo.Int("max", 1, batchBounds[0], batchBounds[1]), Min: bo.Int("min", 1, batchBounds[0], batchBounds[1]),
		MaxAge: bo.Duration("max_age", 0, spanBounds[0], spanBounds[1])}
	bo.Done()
	return b
}

// Batch reads the batch object of o, if it has one, and returns alg (of the algorithm named
// name) in batched mode, as a rule's batch field does; else, or when the object is invalid (the
// error recorded on o), alg itself. For configs other than rules (the rate limit service's
// descriptors), in cluster mode.
func Batch(o *conf.Obj, alg algos.Algorithm, name string) algos.Algorithm {
	b := ReadBatch(o)
	if b == nil || !b.check(o.Sink().Obj("batch")) || alg == nil {
		return alg
	}
	if a := b.wrap(o.Sink(), alg, name); a != nil {
		return a
	}
	return alg
}
