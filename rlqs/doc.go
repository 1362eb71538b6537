// Package rlqs is Envoy's rate limit quota service (envoy.service.rate_limit_quota.v3
// RateLimitQuotaService, StreamRateLimitQuotas) in dianad: Envoy's rate_limit_quota filter
// enforces quota assignments itself and reports usage in the background; dianad divides each
// fleet-wide limit among the Envoy instances that report for a bucket, by the usage each
// reports.
//
// # Buckets and limits
//
// A bucket is identified as Envoy identifies it: the bucket_id map its bucket_matchers build.
// It maps onto a limit of the RLS descriptor config (package rls, envoyproxy/ratelimit's format,
// the same files and domains): no third grammar. The bucket's domain is the stream's; its
// entries, a map without order, are read as a descriptor whose entries take the tree level by
// level (rls.Config.Bucket), each matching a descriptor as an RLS entry does (key and value, a
// wildcard value, then the key alone): the first way, trying the keys in sorted order and going
// back where a way ends short, that takes every key to a level with a limit. So the bucket
// {name: api, tenant: acme} meets the descriptors name=api → tenant, as the RLS descriptor
// (name, api), (tenant, acme) would, and {zone: eu, name: api} meets zone → name=api.
// Each distinct bucket id is one fleet-wide limit (a share_threshold value counts every value
// it matches as one).
//
// # Answers
//
// Every usage report is answered at once, with an action for each bucket it reports:
//   - no limit for the bucket, an unlimited one, or one in shadow_mode: blanket_rule ALLOW_ALL
//     (counted and logged by dianad as a pass without limit);
//   - requests_per_unit 0: blanket_rule DENY_ALL;
//   - else a token_bucket: the instance's share of the limit's rate (requests_per_unit a unit),
//     tokens_per_fill over a fill_interval of whole seconds (Envoy reads no fraction) long
//     enough that the share is exact to a thousandth of the limit, and max_tokens the share of
//     Burst (at least MinTokens). Envoy starts a new, full token bucket whenever an assignment differs
//     from the active one, so a share that moved by less than Tolerance is sent again
//     unchanged; the burst stays small because each real change can admit max_tokens more.
//     The limit is enforced as a rate: a window's whole amount is not offered as one burst.
//
// assignment_time_to_live is at least Options.AssignmentTTL and three of the bucket's report
// intervals, in whole seconds. A bucket that reports no request for IdleAfter (or five report
// intervals, if longer) is abandoned (abandon_action), and forgotten; Envoy starts it afresh at
// its next request. On reload (SetConfig) every stream re-plans its buckets at once: a changed
// limit is assigned its new share without waiting for a report, a bucket whose limit disappeared
// gets abandon_action.
//
// # The split
//
// Each stream is one Envoy instance. Its demand for a bucket is requests allowed plus denied
// (what it was asked, not what it admitted) over the time between its reports on dianad's
// clock (Envoy's time_elapsed has whole seconds only), smoothed. The Fleet holds every
// instance's demand per bucket with an expiry of one assignment TTL: a Table in this process
// (local mode) or a hash per bucket in Redis changed only by fleet.lua, the Lua twin of merge
// (cluster mode, so that every dianad divides one limit among every instance), which keeps the
// instances' expiries and totals beside the hash: a report costs Redis O(log n) in the bucket's
// instances, not a read of all n (every instance reports every interval: n² an interval). An instance's
// share is the limit times its demand over the sum of the instances' demands; an instance
// whose demand is not measured yet (its first report) gets an equal share, the others divide
// the rest. If Redis fails, Options.OnError decides: ALLOW_ALL, DENY_ALL, or a share among this
// process's instances of the limit divided by Options.Nodes. In dianad each round trip to Redis
// goes through the circuit breaker of the node's decisions (Options.Guard, failover.Store.Call):
// Redis failures of either open it for both, and while it is open reports are answered by
// OnError at once, without a round trip or its timeout, until a probe finds Redis again.
//
// # Bad streams and bounds
//
// A stream ends with a status naming the field: INVALID_ARGUMENT for a first report without a
// domain, a domain changed on the stream, a malformed bucket id (empty, an empty key or value,
// more than MaxBucketEntries entries or MaxBucketLen bytes) and absurd usage (more than
// MaxReportRequests in one report); NOT_FOUND for a domain no descriptor file declares;
// RESOURCE_EXHAUSTED for more than Options.MaxBucketsPerStream buckets on the stream, more than
// Options.MaxBuckets on every stream together, or more than Options.MaxStreams streams. A
// report is checked whole before anything is kept. Memory is therefore bounded: a stream holds
// at most MaxBucketsPerStream buckets of at most MaxBucketLen bytes of id each, the process at
// most MaxBuckets buckets over MaxStreams streams, and a bucket of the fleet at most
// MaxInstances instances (one more is given an equal share without being recorded). Options' hooks feed dianad's metrics and logs.
package rlqs
