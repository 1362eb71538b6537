package rules

import (
	"context"

	"github.com/diana-gw/diana/shared/algos"
)

// The stores' contract. A decision has one shape from the Engine to the last store: Op, the
// key, the algorithm and the request, with what the rule says the stores need (its fail policy
// and fallback for store/failover, its batched mode for store/batch), and the answer (Dec, Err). Every store and
// every layer of one implements Store, Decide(ctx, []*Op), so the layers stack — store/failover
// in front of store/batch in front of store/redisstore — and the Engine's ops go through them as
// they are, never copied into a shape of each layer. The local stores take them too
// (store/slotstore; store/memstore decides one key at a time, which Each makes a Store).
//
// The call type lives here, beside the Engine that makes it, rather than in a package of its own
// below: an op names its rule (Op.Rule, for failover's learned shares) and its fail policy and
// batched mode are the rule's types, so a package under rules could not hold them without
// restating them. Its imports are as light as such a package's would be (shared/algos,
// shared/conf and the standard library; no I/O): TinyGo builds it into diana.wasm.
//
// What one layer keeps for itself stays in that layer: store/batch's units held and which ops it
// answered from them without a round trip (batch.Store.DecideHeld, which store/failover asks so
// that such answers say nothing about Redis), and redisstore's coalescing of concurrent calls.
// The one answer beyond Dec and Err is the time a store granted a partial request at, on its own
// clock (Redis TIME), which it writes into that request's Now (see Op.Req): the time the units
// count at, which store/batch needs to give them back.

// Op is one limit to decide for one request: the key of the identity under a rule, the rule's
// algorithm and the request. It is the one call every store takes (see Store): the Engine makes
// it, and the same value goes through every layer of a store, none of which copies it into a
// shape of its own. A store fills Dec, or Err when it could not decide.
//
// Its fields are what the rule says (Key, Alg, Req, OnError, Fallback, Batch) and what the
// store answers (Dec, Err): nothing a layer keeps for itself. A layer's own bookkeeping stays
// in the layer (store/batch's units held, which calls it answered without a round trip).
type Op struct {
	Key string
	Alg algos.Algorithm
	// Req is the request. A store that decides on a clock of its own sets Req.Now to the time
	// it granted a partial request at (redisstore: Redis's TIME), when it granted units: the
	// time they count at, which algos.Batching.Refund takes to give them back.
	Req algos.Request

	// For cluster stores: what to do when the shared store cannot decide, and the algorithm
	// to decide with locally then (the rule's limit divided by its node count).
	OnError  FailPolicy
	Fallback algos.Algorithm
	// Batch is the rule's batched mode when it has one (Alg is then Batch itself, as a plain
	// algorithm): a batching store (store/batch) takes its units in batches; every other store
	// decides with Alg, exactly. Whoever makes an op sets it (NewOp does).
	Batch *Batched
	// Shadow says the rule only logs what it would deny: in a request decided together
	// (Together), its denial refuses nothing.
	Shadow bool

	Dec algos.Decision
	Err error

	rule *Rule
}

// NewOp returns the op of rule r for key and req as an Engine makes it: r's algorithm, fail
// policy, fallback and batched mode, and Rule() = r. For callers that decide a rule's ops
// outside an Engine (a simulation replaying requests through a store that learns per rule).
func NewOp(r *Rule, key string, req algos.Request) Op {
	b, _ := r.Alg.(*Batched)
	return Op{Key: key, Alg: r.Alg, Req: req, OnError: r.OnError, Fallback: r.Fallback, Batch: b, Shadow: r.Action == Shadow, rule: r}
}

// Rule returns the rule op decides for, or nil for an op made outside an Engine or NewOp.
func (op *Op) Rule() *Rule { return op.rule }

// Store decides ops: the one interface of every store and of every layer of one, so that
// layers stack (store/failover → store/batch → store/redisstore) and an op goes through them
// as it is. Each op is atomic on its own key; a store may decide a batch in one round trip but
// never needs to make the batch atomic: the Engine checks every op as a dry run (Req.DryRun)
// before it commits any, unless the store decides a request's ops together (Together).
type Store interface {
	Decide(ctx context.Context, ops []*Op)
}

// Together is implemented by the stores that decide the limits of one request together, all or
// nothing, in one call: cluster mode's stack, where the call is one script call per Redis slot
// (store/redisstore). The Engine decides a request's cluster rules with it when its cluster
// store has it, and with a dry run of each and a commit otherwise.
//
// DecideTogether decides ops, the limits of one request, as algos.Together does: each as a dry
// run; then, if none denies (a Shadow op's denial does not count) and denied is false (a limit
// decided elsewhere refused the request), every op is committed; otherwise only the denials that
// start a ban (not a Shadow op's) are. It sets each op's Req.DryRun to whether it was left
// uncommitted, and its Dec and Err as Decide does. The ops are never releases nor partial
// requests, and their keys are distinct.
//
// All or nothing holds among the ops one call decides. Where a store must split them (a Redis
// Cluster, whose script calls take keys of one slot), each part is all or nothing on its own: a
// part that admits the request is committed even if another refuses it, which takes units the
// request does not use (never more than the limits allow), as two racing phases could before.
// An op decided by its fail policy (store/failover) counts as it is decided.
type Together interface {
	Store
	DecideTogether(ctx context.Context, ops []*Op, denied bool)
}

// FailPolicy says what a rule does when its cluster store cannot decide (Redis down, slow or
// failing).
type FailPolicy uint8

const (
	// FailOpen admits the request, as Kong's fault_tolerant does.
	FailOpen FailPolicy = iota
	// FailClosed denies the request.
	FailClosed
	// FailLocal decides in process memory with the limit divided by the expected node count.
	FailLocal
)

// FailPolicyNames are the config names of the fail policies, by value.
var FailPolicyNames = [...]string{FailOpen: "open", FailClosed: "closed", FailLocal: "local"}

func (p FailPolicy) String() string { return FailPolicyNames[p] }

// Each adapts a store that decides one key at a time without I/O, such as memstore's Decide.
type Each func(key string, alg algos.Algorithm, r algos.Request) algos.Decision

// Decide decides every op in turn.
func (f Each) Decide(_ context.Context, ops []*Op) {
	for _, op := range ops {
		op.Dec = f(op.Key, op.Alg, op.Req)
	}
}
