package rules

import (
	"sort"

	"github.com/diana-gw/diana/shared/algos"
)

// The registries of algorithms and dimensions, by the names configs use. They are written only
// by init functions (one per file that adds an algorithm or a dimension) and read-only after, so
// adding a kind is a new file with a Register call in its init, and no edit elsewhere.
var (
	algorithms = map[string]AlgorithmKind{}
	dimensions = map[string]DimensionKind{}
)

// AlgorithmKind is an algorithm a rule can name in limit.algorithm: its parameters, stated once
// (the decoder reads them; schema/limit.schema.json and the docs' tables are generated from them,
// and the Kong plugin maps its flat fields onto their roles), and how to build it.
type AlgorithmKind struct {
	// Params are the fields of the rule's limit object besides algorithm, in the order the docs
	// list them.
	Params []Param
	// Build returns the algorithm for the parameters read, by name, with its limit shared among
	// nodes nodes (1: the whole limit; more: each node's share when it degrades to local
	// limiting). Errors are *algos.ParamError naming a parameter. It divides every Count
	// parameter by nodes: Rule.FallbackAt builds num/den of a limit by multiplying them by num
	// and building for den nodes (a LocalOnly kind, which has no fallback, is exempt).
	Build func(p Params, nodes int64) (algos.Algorithm, error)
	// Leases is true when an admitted request holds its units until it ends (concurrency): the
	// front end must call Engine.Release when the request completes.
	Leases bool
	// Latency is true when the algorithm learns from the latency the front end measures around
	// the upstream call and reports when the request ends (Engine.Finish): front ends that do
	// not measure it refuse the algorithm.
	Latency bool
	// LocalOnly is true when the algorithm learns from what one node sees (adaptive): rules
	// refuse it in cluster mode.
	LocalOnly bool
	// Waits is true when the algorithm can hold a request instead of denying it (Request.MaxWait),
	// which the delay action needs.
	Waits bool
	// Unsplit, when set, says why the algorithm does not hold its limit when each node limits on
	// its own share (on_error local while Redis is down): Rule.Warnings names it.
	Unsplit string
	Doc     string // one line for docs and errors
	// What the rate-limit headers say for it (docs): RateLimit-Limit, and RateLimit-Reset's bound.
	LimitDoc, ResetDoc string
}

// Params are the values of an algorithm's parameters, by name: counts, durations in µs, and
// flags as 0 or 1.
type Params map[string]int64

// Param is one parameter of an algorithm.
type Param struct {
	Name     string
	Type     ParamType
	Role     Role
	Required bool
	Default  int64  // the value when absent and not Required (a duration in µs, a flag 0 or 1)
	Same     string // when set, the default is this other parameter's value
	AtMost   string // when set, the default is at most this other parameter's value
	Min, Max int64
	Excludes string // a parameter this one may not be given with
	Example  int64  // a typical value, for schemas and docs
	Doc      string
	// Largest, when set, is the largest value the algorithm takes for this parameter given the
	// others (resolved, see AlgorithmKind.Resolve), below Max where they tie it (a bucket's
	// refill time): a front end whose schema cannot state that bound lowers a value to it.
	Largest func(p Params) int64
}

// ParamType is how a parameter is written: an integer count, a duration with a unit, a boolean.
type ParamType string

const (
	Count    ParamType = "count"
	Duration ParamType = "duration"
	Flag     ParamType = "flag"
)

// Role is what a parameter is to a front end whose config names one limit and one window for any
// algorithm (the Kong plugin's limit, window, burst and warmup fields).
type Role string

const (
	Amount Role = "amount" // the count a limit allows: limit, rate, max
	Window Role = "window" // the time it is counted over: window, period, lease
	Burst  Role = "burst"
	Warmup Role = "warmup"
	// SubWindows is the sliding window's subwindows.
	SubWindows Role = "subwindows"
)

// Algorithm returns the kind registered under name.
func Algorithm(name string) (AlgorithmKind, bool) {
	k, ok := algorithms[name]
	return k, ok
}

// Param returns the parameter of k with the given role.
func (k AlgorithmKind) Param(role Role) (Param, bool) {
	for _, p := range k.Params {
		if p.Role == role {
			return p, true
		}
	}
	return Param{}, false
}

// param returns the parameter of k named name.
func (k AlgorithmKind) param(name string) (Param, bool) {
	for _, p := range k.Params {
		if p.Name == name {
			return p, true
		}
	}
	return Param{}, false
}

// Example returns the parameters of k with their examples (defaults where there is none).
func (k AlgorithmKind) Example() Params {
	v := Params{}
	for _, p := range k.Params {
		v[p.Name] = p.Default
		if p.Example != 0 {
			v[p.Name] = p.Example
		}
	}
	return v
}

// Logs reports whether k keeps a log per identity (sliding log, concurrency) rather than a few
// words: stores with fixed-size entries cannot hold it.
func (k AlgorithmKind) Logs() bool {
	a, err := k.Build(k.Example(), 1)
	return err == nil && a.Script().Log
}

// Batches reports whether rules of k can take the batch option (batched cluster mode): its
// example builds into an algorithm that algos can take in batches.
func (k AlgorithmKind) Batches() bool {
	a, err := k.Build(k.Example(), 1)
	if err != nil {
		return false
	}
	l, ok := a.(algos.Batcher)
	if !ok {
		return false
	}
	_, err = l.Batching(0)
	return err == nil
}

// DimensionKind is what a rule can count by, named in its "by" list as NAME or NAME:ARG.
type DimensionKind struct {
	// New returns the dimension for ARG ("" when the config gave none), or a reason ARG is wrong.
	New   func(arg string) (Dimension, string)
	Reads Reads // the parts of a request it reads, for front ends that ask for only those
	// Arg is the form of ARG, a regular expression, for the JSON Schema's pattern; "" for a kind
	// that takes none. New decides; TestDimensionArgs keeps the two in agreement.
	Arg string
	Doc string
}

// Dimension extracts one part of a request's identity.
type Dimension interface {
	// Value returns the request's value; ok is false when the request has none (no consumer,
	// no such header), in which case the request counts by its client address instead (see
	// Rule.key): it is never let through for lacking one. An empty value with ok
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

// AlgorithmsWhere lists the registered algorithms whose kind satisfies keep, sorted.
func AlgorithmsWhere(keep func(AlgorithmKind) bool) []string {
	var out []string
	for _, name := range Algorithms() {
		if keep(algorithms[name]) {
			out = append(out, name)
		}
	}
	return out
}

// Dimensions lists the registered dimension names, sorted.
func Dimensions() []string { return sortedKeys(dimensions) }

// DimensionNamed returns the dimension kind registered as name.
func DimensionNamed(name string) (DimensionKind, bool) {
	k, ok := dimensions[name]
	return k, ok
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
