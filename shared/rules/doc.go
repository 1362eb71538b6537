// Package rules decides requests against rate-limit rules: a rule says which requests it
// matches, how it keys them (its dimensions), its algorithm (shared/algos) and what happens over
// the limit; an Engine decides a request against every rule that applies, in the stores of the
// rules' modes.
//
// # Stores
//
// A decision has one shape from the Engine to the last store: Op, the key, the algorithm and the
// request, with what the rule says the stores need (its fail policy and fallback for
// store/failover, its batched mode for store/batch), and the answer (Dec, Err). Every store and
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
package rules
