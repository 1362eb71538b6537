package main

import (
	"errors"
	"strconv"
	"strings"

	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/conf"
	"github.com/diana-gw/diana/shared/rules"
)

// config is the filter's plugin configuration: the JSON of the PluginConfig's
// google.protobuf.StringValue. See docs/envoy.md for the reference.
type config struct {
	rules []*rules.Rule // local rules, decided in shared data

	xffHops    int            // X-Forwarded-For entries appended by trusted proxies; 0: source.address
	consumer   string         // the request header holding the consumer (lower case); "": none
	reads      rules.Reads    // what the rules read of a request (each part is a host call); all of it in cluster mode
	ipv6Prefix int            // IPv6 clients are counted by this prefix (128: the address)
	path       rules.PathForm // escaped_slashes and strip_trailing_dots_spaces

	slots       int // shared-data keys per rule
	slotEntries int // identities one slot holds before it evicts
	casRetries  int // attempts of get → decide → set before giving up

	// enabled and enforced are local_ratelimit's filter_enabled and filter_enforced, in parts
	// per million: the requests the filter decides at all, and of those, the ones whose denial
	// it answers (the others pass, counted and logged as a shadow rule's would-be denials).
	enabled, enforced int64

	cluster *clusterConfig // nil: local mode only

	// bodyRules are the local rules that read the request body (a usage rule's format or
	// estimate_body): a request one of them matches is decided once its body's first bytes are
	// read (body.go).
	bodyRules []*rules.Rule
}

// clusterConfig is cluster mode: every request that the local rules admit is checked with
// dianad's POST /v1/check on an Envoy cluster.
type clusterConfig struct {
	name      string           // the Envoy cluster of dianad's admin listener
	authority string           // :authority of the callout (Envoy hashes on it); default name
	path      string           // default /v1/check
	settle    string           // settle_path, default /v1/settle: where a usage rule's cost is settled
	timeoutMS uint32           // callout timeout
	token     string           // dianad's admin.token, sent as a bearer token
	headers   []string         // request headers to send (lower case); nil: all but the sensitive ones
	onFailure rules.FailPolicy // what a failed callout does: open, closed, or local (decide rules in shared data)
	status    int              // fail closed: the reply status
	rules     []*rules.Rule
}

// Limits of the filter-specific fields.
const (
	maxSlots       = 1 << 16
	maxSlotEntries = 256
	maxCASRetries  = 100
	maxTimeout     = 60 * algos.Second
)

// parseConfig parses and validates the plugin configuration. The error lists every invalid
// field with its path ("rules[0].limit.rate: must be ...").
func parseConfig(data []byte) (*config, error) {
	doc, err := conf.ParseJSON(data)
	if err != nil {
		return nil, errors.New("diana.wasm configuration: " + err.Error())
	}
	errs := &conf.Errors{Source: "diana.wasm configuration"}
	o := conf.Read(doc, errs)
	c := readConfig(o)
	switch {
	case !o.Has("rules") && !o.Has("cluster"):
		o.Fail("rules", "is required unless cluster is set (the filter would limit nothing)")
	case o.Has("rules") && !limits(c.rules) && !o.Has("cluster") && !failed(errs):
		o.Fail("rules", "holds no rule that limits (none, or only unlimited ones) and cluster is not set: the filter would limit nothing")
	}
	o.Done()
	if err := errs.Err(); err != nil {
		return nil, err
	}
	c.reads = rules.ReadsOf(c.rules)
	for _, r := range c.rules {
		if rules.ReadsOf([]*rules.Rule{r}).Body {
			c.bodyRules = append(c.bodyRules, r)
		}
	}
	if c.cluster != nil { // dianad's rules may read anything
		c.reads = rules.All
	}
	return c, nil
}

// readConfig reads the configuration's fields from o: the grammar that docs/envoy.md's field
// tables are checked against (TestDocsFieldTables).
func readConfig(o *conf.Obj) *config {
	c := &config{}
	c.consumer = strings.ToLower(o.String("consumer_header", ""))
	c.rules = decodeRules(o, c.consumer, false)
	c.xffHops = int(o.Int("xff_trusted_hops", 0, 0, 64))
	c.ipv6Prefix = int(o.Int("ipv6_prefix", 64, 1, 128))
	c.path = rules.PathForm{Slashes: rules.DecodeEscapedSlashes(o), StripDotsSpaces: o.Bool("strip_trailing_dots_spaces", false)}
	c.slots = int(o.Int("slots", 512, 1, maxSlots))
	c.slotEntries = int(o.Int("slot_entries", 16, 1, maxSlotEntries))
	c.casRetries = int(o.Int("cas_retries", 8, 1, maxCASRetries))
	c.enabled = decodeFraction(o, "filter_enabled")
	c.enforced = decodeFraction(o, "filter_enforced")
	if o.Has("cluster") {
		c.cluster = decodeCluster(o.Obj("cluster"), c.consumer)
		for _, r := range c.cluster.rules { // one name, one state: they would share slots
			for i, top := range c.rules {
				if top.Name == r.Name {
					o.Fail("rules["+strconv.Itoa(i)+"].name", strconv.Quote(r.Name)+" is also the name of a rule in cluster.rules: names must differ, or the two rules would share one count")
				}
			}
		}
	}
	return c
}

// limits reports whether one of rs limits (is not an unlimited rule).
func limits(rs []*rules.Rule) bool {
	for _, r := range rs {
		if !r.Unlimited {
			return true
		}
	}
	return false
}

// failed tells whether errs holds an error already (an empty list may be what is left of a bad one).
func failed(errs *conf.Errors) bool { return errs.Err() != nil }

func decodeCluster(o *conf.Obj, consumer string) *clusterConfig {
	c := &clusterConfig{}
	o.Require("name")
	c.name = o.String("name", "")
	if o.Has("name") && c.name == "" {
		o.Fail("name", "cannot be empty: it is the Envoy cluster of dianad")
	}
	c.authority = o.String("authority", c.name)
	c.path = o.String("path", "/v1/check")
	if len(c.path) == 0 || c.path[0] != '/' {
		o.Fail("path", "must start with /, got "+strconv.Quote(c.path))
	}
	c.settle = o.String("settle_path", "/v1/settle")
	if len(c.settle) == 0 || c.settle[0] != '/' {
		o.Fail("settle_path", "must start with /, got "+strconv.Quote(c.settle))
	}
	c.timeoutMS = uint32(o.Duration("timeout", 200*algos.Millisecond, algos.Millisecond, maxTimeout) / algos.Millisecond)
	c.token = o.String("token", "")
	if o.Has("headers") {
		c.headers = []string{}
		for _, h := range o.Strings("headers") {
			c.headers = append(c.headers, strings.ToLower(h))
		}
	}
	v := o.Enum("on_failure", "open", rules.FailPolicyNames[:]...)
	for i, f := range rules.FailPolicyNames {
		if f == v {
			c.onFailure = rules.FailPolicy(i)
		}
	}
	c.status = int(o.Int("failure_status", 503, 400, 599))
	c.rules = decodeRules(o, consumer, true)
	if c.onFailure == rules.FailLocal && len(c.rules) == 0 {
		o.Fail("rules", "is required when on_failure is local: the rules to decide in shared data while dianad cannot")
	}
	o.Done()
	return c
}

// needsLatency reports whether the algorithm learns from the latency reported when a request
// ends (adaptive).
func needsLatency(name string) bool {
	k, ok := rules.Algorithm(name)
	return ok && k.Latency
}

// holds reports whether alg admits requests with a delay to hold them (a leaky bucket without
// nodelay). The filter refuses those rather than forward them at once, which would make the
// same rule mean one thing in dianad and another here. Holding for real needs a resume from
// OnTick, which the SDK's emulator cannot run (its continue_stream ignores the effective
// context), so it could not be tested on the compiled module.
func holds(alg algos.Algorithm) bool {
	h, ok := alg.(interface{ Holds() bool })
	return ok && h.Holds()
}

// bounded tells whether a "by" entry takes its values from configuration, never from clients:
// global, or route (Envoy's route names come from the route table).
func bounded(by string) bool { return by == "global" || by == "route" }

// decodeRules reads o's "rules" and rejects what the filter cannot do: cluster-mode rules
// (cluster mode goes through dianad), delays and leaky buckets without nodelay (the filter does
// not hold requests), the algorithms
// whose state is a list per client, which does not fit a fixed-size slot entry, and counting by
// consumer without consumer_header (the filter would never see one). Adaptive rules keep their
// state under a shared-data key per identity (slotstore.States), which can never be deleted: they
// may count only by global or route, and not in cluster.rules (fallback).
func decodeRules(o *conf.Obj, consumer string, fallback bool) []*rules.Rule {
	rs := rules.Decode(o)
	for i, r := range rs {
		p := "rules[" + strconv.Itoa(i) + "]"
		switch {
		case r.Mode == rules.Cluster:
			o.Fail(p+".mode", "must be local: the filter's cluster mode asks dianad (set cluster), which holds the cluster rules")
		case r.Action == rules.Delay:
			o.Fail(p+".action", "delay is not supported by the Envoy filter, which does not hold requests; use reject or shadow")
		case holds(r.Alg):
			o.Fail(p+".limit.nodelay", r.Algorithm+" without nodelay holds the requests beyond delay (0 unless set, as nginx's limit_req) until they conform, "+
				"which the Envoy filter cannot do: set \"nodelay\": true (or \"delay\" at least burst) to forward the burst at once, or use dianad, which holds them")
		case needsLatency(r.Algorithm) && fallback:
			o.Fail(p+".limit.algorithm", r.Algorithm+" is not supported in cluster.rules, the fallback while dianad cannot decide: put it in the top-level rules, which decide before the callout")
		case needsLatency(r.Algorithm):
			for _, by := range r.By {
				if !bounded(by) {
					o.Fail(p+".by", r.Algorithm+" may count only by global or route in the Envoy filter, got "+strconv.Quote(by)+
						": its state takes a shared-data key per value, which Envoy never deletes, so a value a client chooses would grow memory without bound; "+
						"and an adaptive limit is one limit for a backend (as Envoy's adaptive_concurrency), not one per client")
					break
				}
			}
		case r.Leases:
			o.Fail(p+".limit.algorithm", r.Algorithm+" holds a lease per request in flight, a list that the filter's fixed-size shared-data slots cannot hold; use it in dianad (cluster), or adaptive (by global or route) for a node-wide limit of requests in flight")
		case r.Alg != nil && r.Alg.Script().Log:
			o.Fail(p+".limit.algorithm", r.Algorithm+" keeps a log of request times per client, which the filter's fixed-size shared-data slots cannot hold; use one of "+
				strings.Join(rules.AlgorithmsWhere(func(k rules.AlgorithmKind) bool { return !k.Logs() && !k.Leases }), ", "))
		case r.Alg != nil && r.Alg.Script().Words > 0:
			o.Fail(p+".limit.subwindows", "the filter's shared-data slots hold 4 numbers per client: at most 2 sub-windows (subwindows + 2 numbers); use dianad for more")
		}
		for _, f := range r.ConsumerFields() {
			if consumer == "" {
				o.Fail(p+"."+f, "the consumer needs consumer_header: the request header in which an authentication filter (jwt_authn's claim_to_headers, ext_authz) puts the consumer; without it the filter never sees one")
			}
		}
	}
	return rs
}
