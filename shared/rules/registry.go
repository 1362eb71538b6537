package rules

import (
	"sort"

	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/conf"
)

// The registries of algorithms and dimensions, by the names configs use. They are written only
// by init functions (one per file that adds an algorithm or a dimension) and read-only after, so
// adding a kind is a new file with a Register call in its init, and no edit elsewhere.
var (
	algorithms = map[string]AlgorithmKind{}
	dimensions = map[string]DimensionKind{}
)

// AlgorithmKind is an algorithm a rule can name in limit.algorithm.
type AlgorithmKind struct {
	// Decode reads the algorithm's parameters from the rule's limit object, recording errors on
	// it; the object's "algorithm" field is already read.
	Decode func(o *conf.Obj) Limit
	// Leases is true when an admitted request holds its units until it ends (concurrency): the
	// front end must call Engine.Release when the request completes.
	Leases bool
	// Waits is true when the algorithm can hold a request instead of denying it (Request.MaxWait),
	// which the delay action needs.
	Waits bool
	Doc   string // one line for docs and errors
}

// Limit is a decoded algorithm configuration.
type Limit interface {
	// Build returns the algorithm with its limit shared among nodes nodes (1: the whole limit;
	// more: each node's share when it degrades to local limiting).
	Build(nodes int64) (algos.Algorithm, error)
}

// DimensionKind is what a rule can count by, named in its "by" list as NAME or NAME:ARG.
type DimensionKind struct {
	// New returns the dimension for ARG ("" when the config gave none), or a reason ARG is wrong.
	New func(arg string) (Dimension, string)
	Doc string
}

// Dimension extracts one part of a request's identity.
type Dimension interface {
	// Value returns the request's value; ok is false when the request has none (no consumer,
	// no such header), in which case the rule does not apply to it. An empty value with ok
	// adds nothing to the key (as "global" does).
	Value(in *Input) (v string, ok bool)
}

// RegisterAlgorithm adds an algorithm kind; call it from an init function.
func RegisterAlgorithm(name string, k AlgorithmKind) {
	if _, dup := algorithms[name]; dup {
		panic("rules: algorithm " + name + " registered twice")
	}
	algorithms[name] = k
}

// RegisterDimension adds a dimension kind; call it from an init function.
func RegisterDimension(name string, k DimensionKind) {
	if _, dup := dimensions[name]; dup {
		panic("rules: dimension " + name + " registered twice")
	}
	dimensions[name] = k
}

// Algorithms lists the registered algorithm names, sorted.
func Algorithms() []string { return sortedKeys(algorithms) }

// Dimensions lists the registered dimension names, sorted.
func Dimensions() []string { return sortedKeys(dimensions) }

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
