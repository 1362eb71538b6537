// Package rules is what a rule is and how a request is decided against a set of them, the same
// for every front end (the Kong plugin, the Envoy filter, dianad and its rate limit service).
//
// A rule is a typed value first. Spec states a rule in plain Go values (its match, what it
// counts by, its algorithm and parameters, mode, action, reply, ban, batch); NewSpec holds the
// defaults. Spec.Build is the one validation: it checks every value and every tie between values,
// records each error at the path its field has in a document ("limit.burst", "match.not[0]"),
// and returns the Rule with what it derives (the algorithm built from the registry, the
// dimensions, the per-node fallback). Every config format is a reader that fills a Spec:
//
//   - ReadSpec reads one rule of a YAML or JSON document (shared/conf) and checks only what a
//     document can get wrong that a Spec cannot hold: a value's type, an enum's name, an unknown
//     key, a field that another rules out. Decode reads a document's rules list.
//   - The Kong plugin fills a Spec from its flat, typed fields.
//   - The rate limit service builds its limits' algorithms from the same registry
//     (AlgorithmKind.Resolve, Batch).
//
// The algorithms and the dimensions are registered by name (RegisterAlgorithm,
// RegisterDimension): an AlgorithmKind states its parameters once (type, bounds, default, role,
// the largest value the others allow), from which the decoder, schema/limit.schema.json, the
// docs' tables and the Kong plugin's fields derive; a DimensionKind states what it reads of a
// request (Reads), which front ends use to ask for nothing more.
//
// Engine decides a request (Input) against the rules: each rule that matches gives an op (Op,
// a key and the rule's algorithm), and the request is committed to every op only if none denies
// it, so a request denied by one rule takes nothing from the others: the cluster store decides a
// request's cluster ops together in one call (Together), the other ops are checked as dry runs
// before any is committed. Stores decide ops: process memory, the Envoy filter's shared data,
// Redis.
//
// A cost can arrive late (usage.go): a rule with a Usage reserves an estimate when Check admits
// the request, a Meter reads the response's usage as it passes (shared/usage), and Engine.Settle
// charges the actual cost, or the rule's fallback, through the same stores once the response has
// ended (algos.Settle).
//
// The files, by job: spec.go and rule.go the model and its validation; algorithms.go,
// registry.go, dimensions.go, bodydim.go, clientkey.go and batch.go the registered kinds; match.go
// and path.go what a rule matches and the one normal form of a path; input.go and reads.go what a
// rule sees of a request; engine.go and store.go the decision and the stores' contract; reply.go
// the answers; usage.go, meter.go and settle.go the costs known late; adaptive.go and peek.go the
// adaptive rules' feedback and the admin's peek.
//
// Why one package: the model, the engine and the settlement share a request's private state (its
// ops and their keys, the leases it holds, the reservations it settles) and a rule's built parts
// (its algorithm, its dimensions); split, each would export what only the other reads, and every
// front end would import three packages to decide one request. What has a job of its own outside
// the engine lives outside it: the algorithms (shared/algos), a response's usage and a request's
// model and output cap (shared/usage), JSON (shared/jsontok), the config tree (shared/conf).
package rules
