package main

// The plugin's flat config, one table that both the decoder (config.go) and the -dump schema
// (schema.go) read. A field that stands for a rule property names it in From (a JSON pointer
// into schema/rule.schema.json): its type, enum, bounds and default come from there, so the
// schema Kong and Konga see cannot drift from the one the rules are validated against.
//
// Desc is what operators read: Kong Manager shows it as the field's help, rendered as Markdown
// (so no <word>, and no * or _ pairs), under a label made of the name ("ip_limit" is "Ip
// Limit"), with the required fields (those with a default, but the Advanced ones) in
// alphabetical order and the optional ones under "Show additional settings" (kongmanager_test.go drives that form and keeps
// it, testdata/kongmanager/form.json); Konga shows no description at all, and what it renders
// is the table of docs/kong.md (konga_test.go).

import (
	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/stack"
)

// field is one config field as Kong's schema describes it. Zero values mean "take it from the
// rule schema" (when From is set) or "none". Every constraint here is one Kong checks at its
// Admin API (see kongField) and the decoder checks the same way (see readField).
type field struct {
	Name     string
	Type     string // string, integer, boolean, array (of strings)
	From     string // "#/pointer" into rule.schema.json or "FILE#/pointer" into another schema file; "" for a Kong-only field
	Default  any    // nil: no default (optional field, absent unless set)
	OneOf    []string
	Min, Max *int64
	Empty    bool      // a string that may be "" (Kong refuses an empty string unless len_min is 0)
	Match    *matchAny // a string (or an array's strings) must match one of these Lua patterns
	None     []matchNot
	// Applies, when set, is when the field means something; otherwise a value other than its
	// default is ignored with a warning (Kong merges partial updates, and Konga cannot clear a
	// field, so leftovers are common): never an error.
	Applies *cond
	// Advanced fields are optional in Kong's schema though they have a default (Kong fills it in
	// when the field is absent, as for its own rate-limiting's Redis settings): Kong Manager
	// then shows them under "Show additional settings", below the limits an operator sets.
	Advanced bool
	// Secret fields as Kong's own Redis settings mark them: encrypted in Kong's database (with
	// keyring encryption on), and referenceable, so a vault reference such as
	// {vault://env/redis-password} stands for the value (Kong resolves it before the plugin
	// sees the config).
	Encrypted, Referenceable bool
	Desc                     string
}

// cond is a condition on a field's value, as a conditional entity check's if_match states it
// (one_of, or eq for a single value).
type cond struct {
	Field string
	OneOf []any
}

// check is one of Kong's conditional entity checks: when If holds, Then must satisfy the rest.
type check struct {
	If       cond
	Then     string
	Required bool
	Eq       any
	Between  *[2]int64
}

func bounds(min, max int64) (*int64, *int64) { return &min, &max }

// group is one extra limit of a plugin instance: a fixed, flat set of fields per dimension,
// so that Konga can edit several limits in one instance (it cannot edit maps or arrays of
// records). A limit of 0 turns the group off.
type group struct {
	Name string // prefix of the fields, and part of the rule's name
	By   string // the dimension it counts by
	Doc  string
}

var groups = []group{
	{"ip", "ip", "each client IP (as Kong's trusted_ips and real_ip_header resolve it; IPv6 clients by their /64)"},
	{"consumer", "consumer", "each authenticated Kong consumer (requests without a consumer are not counted)"},
	{"device", "device", "each device, read from the header device_header (requests without it are not counted)"},
	{"path", "path", "each URL path, across all clients"},
	{"global", "global", "all requests together, one count for the whole plugin instance"},
}

// limitBy are the values of limit_by, as Kong's rate-limiting names them.
var limitBy = []string{"ip", "consumer", "credential", "header", "path", "service", "global"}

const maxLimit = algos.MaxCount // the largest limit or rate the algorithms take

// fieldTable returns the config fields in the order Konga shows them.
func fieldTable() []field {
	limMin, limMax := bounds(1, maxLimit)
	portMin, portMax := bounds(1, 65535)
	zeroMin, zeroMax := bounds(0, maxLimit)
	dbMin, dbMax := bounds(0, 1<<31-1)
	toMin, toMax := bounds(stack.MinTimeout.Milliseconds(), stack.MaxTimeout.Milliseconds())
	nodesMin, nodesMax := bounds(0, 10000)
	batchMin, batchMax := bounds(0, rules.MaxBatch)
	redis := &cond{"policy", []any{"redis"}}
	tls := &cond{"redis_ssl", []any{true}}
	fs := []field{
		{Name: "limit_by", Type: "string", Default: "ip", OneOf: limitBy,
			Desc: "What the main limit counts by: ip (the client IP as Kong resolves it), consumer, credential, header (the header header_name), path (the URL path), service, or global. A request without that value (no consumer, no header) counts by its client IP instead, as with Kong's rate-limiting: it is never let through for lacking one."},
		{Name: "header_name", Type: "string", Match: headerMatch, Applies: &cond{"limit_by", []any{"header"}},
			Desc: "The request header the main limit counts by when limit_by is header, e.g. X-Api-Key."},
		{Name: "path", Type: "string", Match: pathMatch, None: pathNone, Applies: &cond{"limit_by", []any{"path"}},
			Desc: "With limit_by path: the path pattern the main limit applies to (/login exactly, * one segment, a final ** any rest), counted per path. Empty: every path, each counted on its own."},
		{Name: "escaped_slashes", Advanced: true, Type: "string", Default: "decode", OneOf: rules.EscapedSlashesNames[:],
			Desc: "What %2F, %5C and a backslash in a request's path are to the limits: decode (they separate segments, as upstreams that decode before routing read them; the safe default), keep (part of their segment) or reject (answer 400). Paths are also merged, dot segments resolved and unreserved escapes decoded, so /api//login counts as /api/login."},
		{Name: "strip_trailing_dots_spaces", Advanced: true, Type: "boolean", Default: false,
			Desc: "Strip trailing dots and spaces from each path segment before the limits see it (/api/login. counts as /api/login), for upstreams that strip them as Windows and IIS do. A path holding a control character is answered 400 whenever a limit reads the path."},
		{Name: "algorithm", Type: "string", From: "limit.schema.json#/properties/algorithm", Default: "sliding_window",
			Desc: "The algorithm of every limit of this instance: sliding_window (limit per sliding window), fixed_window, sliding_log (exact, limit at most 10000), token_bucket and leaky_bucket (rate limit per window), warm_up, concurrency (limit requests in flight), or adaptive (requests in flight, the limit learned from the upstream's latency: limit is its highest, window is ignored)."},
		{Name: "limit", Type: "integer", From: "limit.schema.json#/properties/limit", Default: int64(60), Min: limMin, Max: limMax,
			Desc: "The main limit: requests admitted per window (token_bucket, leaky_bucket, warm_up: the rate per window; concurrency: requests in flight; adaptive: the most requests in flight it may learn)."},
		{Name: "window", Type: "string", From: "limit.schema.json#/properties/window", Default: "1m", Match: windowMatch,
			Desc: "The window of the main limit (the period of a rate), a duration such as 1s, 1m, 1h or 1d; for concurrency, how long a slot stays taken if its request's end is never seen."},
		{Name: "burst", Type: "integer", From: "limit.schema.json#/properties/burst", Default: int64(0), Min: zeroMin, Max: zeroMax, Applies: usedBy(rules.Burst),
			Desc: "token_bucket: the bucket size (0: the limit); leaky_bucket: excess requests admitted beyond the rate, as nginx's burst. Ignored by the other algorithms."},
		{Name: "warmup", Type: "string", From: "limit.schema.json#/properties/warmup", Default: "10s", Match: windowMatch, Applies: usedBy(rules.Warmup),
			Desc: "warm_up: how long a cold limiter takes to reach its full rate, a duration such as 10s. Ignored by the other algorithms."},
		{Name: "subwindows", Type: "integer", From: "limit.schema.json#/properties/subwindows", Default: int64(1), Applies: usedBy(rules.SubWindows),
			Desc: "sliding_window: the sub-windows of window / subwindows it counts in (1 to 60): 1 is Cloudflare's weighted estimate of two windows; more bring it closer to the exact count (any (subwindows - 1) / subwindows of a window holds at most limit). Ignored by the other algorithms."},
		{Name: "usage_header", Type: "string", From: "#/properties/usage/properties/header", Match: headerMatch, None: usageNone,
			Desc: "LLM token budgets: the upstream response header holding a request's cost (x-usage-total-tokens; several joined by + add up). Each limit then counts that cost, charged in the log phase against usage_estimate, reserved when the request was admitted; the budget may go below zero. With token_bucket, fixed_window or sliding_window. Empty: every request costs 1."},
		{Name: "usage_estimate", Type: "integer", From: "#/properties/usage/properties/estimate", Default: int64(1), Min: limMin, Max: limMax, Advanced: true,
			Desc: "With usage_header: the units a request reserves when admitted, at least 1 (the default 1 admits while the budget is above zero)."},
		{Name: "usage_fallback", Type: "integer", From: "#/properties/usage/properties/fallback",
			Desc: "With usage_header: the cost of a response without a readable usage header (missing, not a whole number, above 10^15, given twice); empty: the worst case, the limit, at most 1179648 (2^20 input and 2^17 output tokens)."},
	}
	for _, g := range groups {
		fs = append(fs,
			field{Name: g.Name + "_limit", Type: "integer", Default: int64(0), Min: zeroMin, Max: zeroMax,
				Desc: "An extra limit by " + g.Doc + ", with the same algorithm; 0 turns it off. A request must pass every limit."},
			field{Name: g.Name + "_window", Type: "string", From: "limit.schema.json#/properties/window", Default: "1m", Match: windowMatch,
				Desc: "The window of " + g.Name + "_limit, a duration such as 1s, 1m or 1h."},
		)
		if g.Name == "device" {
			fs = append(fs, field{Name: "device_header", Type: "string", Default: "X-Device-Id", Match: headerMatch,
				Desc: "The request header that carries the device id, for device_limit."})
		}
	}
	fs = append(fs,
		field{Name: "shadow", Type: "boolean", Default: false,
			Desc: "Shadow mode: never refuse a request, only log and count what would have been refused. Use it to try a limit on live traffic."},
		field{Name: "ban", Type: "string", From: "#/properties/ban", Default: "0s", Match: spanMatch,
			Desc: "After a refusal, refuse everything from the same identity for this long, a duration such as 10m; 0s is no ban."},
		field{Name: "policy", Type: "string", Default: "local", OneOf: []string{"local", "redis"},
			Desc: "Where the counts live: local (in this Kong node, shared by its workers) or redis (shared by every node, decided atomically by Lua scripts in Redis)."},
		field{Name: "redis_host", Type: "string", Default: "127.0.0.1", Match: hostMatch, Applies: redis, Advanced: true,
			Desc: "policy redis: the Redis host, used when redis_addrs is empty."},
		field{Name: "redis_port", Type: "integer", Default: int64(6379), Min: portMin, Max: portMax, Applies: redis, Advanced: true,
			Desc: "policy redis: the Redis port, used with redis_host."},
		field{Name: "redis_addrs", Type: "array", Default: []any{}, Match: addrMatch, Applies: redis, Advanced: true,
			Desc: "policy redis: host:port addresses (port 6379 if none); several are a Redis Cluster, or the Sentinels when redis_sentinel_master is set. Empty: redis_host and redis_port."},
		field{Name: "redis_sentinel_master", Type: "string", Applies: redis, Advanced: true,
			Desc: "policy redis: the Sentinel master name; redis_addrs then lists the Sentinels."},
		field{Name: "redis_cluster", Type: "boolean", Default: false, Applies: redis, Advanced: true,
			Desc: "policy redis: the address is a Redis Cluster even if it is only one (a configuration endpoint)."},
		field{Name: "redis_username", Type: "string", Referenceable: true, Applies: redis, Advanced: true,
			Desc: "policy redis: the ACL user name, if Redis needs one."},
		field{Name: "redis_password", Type: "string", Empty: true, Encrypted: true, Referenceable: true, Applies: redis, Advanced: true,
			Desc: "policy redis: the password, if Redis needs one. Encrypted in Kong's database (with keyring encryption); a vault reference such as {vault://env/redis-password} works."},
		field{Name: "redis_database", Type: "integer", Default: int64(0), Min: dbMin, Max: dbMax, Applies: redis, Advanced: true,
			Desc: "policy redis: the database number (not with a Redis Cluster)."},
		field{Name: "redis_ssl", Type: "boolean", Default: false, Applies: redis, Advanced: true,
			Desc: "policy redis: connect with TLS."},
		field{Name: "redis_ssl_skip_verify", Type: "boolean", Default: false, Applies: tls, Advanced: true,
			Desc: "policy redis with TLS: do not verify the server's certificate (tests only)."},
		field{Name: "redis_server_name", Type: "string", Match: hostMatch, Applies: tls, Advanced: true,
			Desc: "policy redis with TLS: the name to verify the certificate against, if not the host."},
		field{Name: "redis_ssl_ca_file", Type: "string", Applies: tls, Advanced: true,
			Desc: "policy redis with TLS: a PEM file, on every Kong node, of the CAs to verify the certificate against (a private CA) instead of the system's. Read when the plugin first connects; if it cannot be read, every decision fails and the fail policy applies, logged."},
		field{Name: "redis_ssl_cert_file", Type: "string", Applies: tls, Advanced: true,
			Desc: "policy redis with TLS: a PEM file, on every Kong node, of the client certificate for a Redis that asks for one (mutual TLS); with redis_ssl_key_file. Read when the plugin first connects; if it cannot be read, every decision fails and the fail policy applies, logged."},
		field{Name: "redis_ssl_key_file", Type: "string", Applies: tls, Advanced: true,
			Desc: "policy redis with TLS: a PEM file, on every Kong node, of the private key of redis_ssl_cert_file's certificate."},
		field{Name: "redis_wait_replicas", Type: "integer", From: "dianad.schema.json#/properties/redis/properties/wait_replicas", Default: int64(0), Applies: redis, Advanced: true,
			Desc: "policy redis: above 0, a decision counts only once this many replicas have its write (Redis WAIT, within 3/4 of redis_timeout), else the fail policy decides: a failover then loses no count. Ignored (with a warning) on a Redis Cluster."},
		field{Name: "redis_timeout", Type: "integer", Default: stack.DefaultTimeout.Milliseconds(), Min: toMin, Max: toMax, Applies: redis, Advanced: true,
			Desc: "policy redis: the longest a decision waits for Redis, in milliseconds. After a few failures Redis is left alone for a while, so an outage adds no latency."},
		field{Name: "redis_prefix", Type: "string", Default: stack.DefaultPrefix, Applies: redis, Advanced: true,
			Desc: "policy redis: the prefix of every key Diana writes in Redis."},
		field{Name: "fail_closed", Type: "boolean", Default: false, Applies: redis, Advanced: true,
			Desc: "policy redis, when Redis cannot decide (down, slow, failing): refuse requests. Default (off): let them through, as Kong's fault_tolerant does."},
		field{Name: "fallback_nodes", Type: "integer", From: "#/properties/nodes", Default: int64(0), Min: nodesMin, Max: nodesMax, Applies: redis, Advanced: true,
			Desc: "policy redis, when Redis cannot decide: if above 0, each node limits on its own at the share of the traffic it learned while Redis answered (plus 2%), or, without that history, with every limit divided by this number (the Kong nodes sharing the limit). 0: follow fail_closed."},
		field{Name: "batch_max", Type: "integer", Default: int64(0), Min: batchMin, Max: batchMax, Applies: redis, Advanced: true,
			Desc: "policy redis, batched mode: if above 0, each Kong node takes units from Redis in pre-debited batches of up to this many and spends them on its own: one Redis call per batch, never over the limit. 0: one call per request."},
		field{Name: "batch_max_age", Type: "string", From: "#/properties/batch/properties/max_age", Default: "0s", Match: spanMatch, Applies: redis, Advanced: true,
			Desc: "policy redis with batch_max: how long a node may hold batched units before they expire unspent, e.g. 200ms. 0s: the algorithm's default."},
		field{Name: "hide_client_headers", Advanced: true, Type: "boolean", Default: false,
			Desc: "Do not send the RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset and Retry-After headers."},
		field{Name: "header_style", Advanced: true, Type: "string", Default: "kong", OneOf: rules.HeaderStyleNames[:rules.NoHeaders],
			Desc: "Which rate-limit headers: kong (as Kong's rate-limiting: RateLimit-Limit, -Remaining, -Reset, and X-RateLimit-Limit-Minute and X-RateLimit-Remaining-Minute, named for the window: Second, Minute, Hour, Day, Month, Year, or the window itself such as 10s), draft (the RateLimit-* three only) or structured (the current IETF draft's RateLimit-Policy and RateLimit). Retry-After on every refusal."},
		field{Name: "error_code", Advanced: true, Type: "integer", From: "#/properties/reply/properties/status",
			Desc: "The HTTP status of a refusal, 400 to 599: 429 by default, 503 is common too."},
		field{Name: "error_message", Advanced: true, Type: "string", From: "#/properties/reply/properties/message",
			Desc: "The message of a refusal, sent as the JSON body {\"message\": MESSAGE, \"retry_after\": SECONDS}."},
	)
	return fs
}

// usedBy is the condition that the algorithm has a parameter of the role.
func usedBy(role rules.Role) *cond {
	c := &cond{Field: "algorithm"}
	for _, name := range rules.Algorithms() {
		if k, _ := rules.Algorithm(name); hasRole(k, role) {
			c.OneOf = append(c.OneOf, name)
		}
	}
	return c
}

func hasRole(k rules.AlgorithmKind, role rules.Role) bool {
	_, ok := k.Param(role)
	return ok
}

// roleFields are the count fields that set a parameter of the algorithm by its role.
func roleFields() map[string]rules.Role {
	m := map[string]rules.Role{"limit": rules.Amount, "burst": rules.Burst}
	for _, g := range groups {
		m[g.Name+"_limit"] = rules.Amount
	}
	return m
}

// checks are the entity checks of the schema: Kong runs them at its Admin API and decode runs
// the same. Besides the two written here, policy local for the local-only algorithms, and one
// per count field and set of algorithms whose parameter of that role has narrower bounds than
// the field (sliding_log and concurrency keep an entry per unit: at most 10000), derived from
// the algorithms' registry.
func checks(fs []field) []check {
	cs := []check{
		{If: cond{"limit_by", []any{"header"}}, Then: "header_name", Required: true},
		{If: cond{"fail_closed", []any{true}}, Then: "fallback_nodes", Eq: int64(0)},
	}
	// The algorithms that learn from one node's latencies (adaptive) take policy local only.
	var localOnly []any
	for _, name := range rules.AlgorithmsWhere(func(k rules.AlgorithmKind) bool { return k.LocalOnly }) {
		localOnly = append(localOnly, name)
	}
	if len(localOnly) > 0 {
		cs = append(cs, check{If: cond{"algorithm", localOnly}, Then: "policy", Eq: "local"})
	}
	roles := roleFields()
	for _, f := range fs {
		role, ok := roles[f.Name]
		if !ok || f.Min == nil || f.Max == nil {
			continue
		}
		byBounds := map[[2]int64][]any{}
		var order [][2]int64
		for _, name := range rules.Algorithms() {
			k, _ := rules.Algorithm(name)
			p, ok := k.Param(role)
			if !ok || p.Max >= *f.Max {
				continue
			}
			b := [2]int64{*f.Min, p.Max}
			if byBounds[b] == nil {
				order = append(order, b)
			}
			byBounds[b] = append(byBounds[b], name)
		}
		for _, b := range order {
			cs = append(cs, check{If: cond{"algorithm", byBounds[b]}, Then: f.Name, Between: &b})
		}
	}
	return cs
}
