package main

import (
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/diana-gw/diana/shared/conf"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/redisstore"
	"github.com/diana-gw/diana/store/stack"
)

// settings is a decoded, valid plugin config: the rules it limits with, and what a request
// must be asked for them.
type settings struct {
	Rules []*rules.Rule
	// Warnings say where the config is taken otherwise than written: a field that does not
	// apply to the chosen mode, ignored; a value lowered to what the algorithm holds.
	Warnings []string
	Redis    *stack.Redis // nil with policy local; equal ones share one client (clusterStore)
	// Path is the form the rules see a request's path in: what %2F, %5C and '\' are to them,
	// and whether trailing dots and spaces are stripped from its segments.
	Path rules.PathForm

	// Kong's extra keys.
	PluginID  string // __plugin_id: the instance's id, the same in every worker and node
	ServiceID string // service_id: set when the plugin is scoped to a service

	needs needs
}

// needs says which PDK calls a request costs: only what some rule counts by.
type needs struct {
	IP, Consumer, Credential, Path, Service bool
	Headers                                 bool // GetHeader, per header a rule reads
	Identity                                bool // GetHeaders, once: a rule counts by a header, which must be given once
	Leases                                  bool // Log must give concurrency leases back
	Settles                                 bool // Log must charge the responses' usage (usage_header)
}

// credentialHeader is the name under which the request's Kong credential id is handed to the
// rules, as the value of a "header" dimension. headerGetter answers it from the credential,
// never from the request, so a client cannot set it.
const credentialHeader = "X-Diana-Kong-Credential"

// decode reads a flat plugin config, as Kong sends it (defaults filled in, extra keys added)
// or as written in kong.yml (defaults absent), into rules. Each field is checked against the
// field table as Kong checks it (readField, then the entity checks: read.go); a field that does
// not apply to the chosen mode is ignored with a warning (warnings.go); then the rules are built
// and validated by shared/rules, their errors renamed to the flat fields they came from
// (build.go). On an error the settings returned hold
// only Kong's keys, to say which plugin the error is about. strict rejects keys the schema does
// not have (Kong does that itself before it sends a config; examples and tests ask for it).
func decode(doc conf.Value, strict bool) (*settings, error) {
	errs := &conf.Errors{}
	o := conf.Read(doc, errs)
	s := &settings{}
	s.PluginID = o.String("__plugin_id", "")
	s.ServiceID = o.String("service_id", "")
	fs := resolvedFields()
	if refusedWithoutLogPhase(o) {
		return s, errs
	}
	v := readValues(o, doc, fs, strict)
	if len(errs.List) > 0 {
		return s, errs // the checks and the rules would repeat these errors
	}
	checkValues(o, fs, v)
	if len(errs.List) > 0 {
		return s, errs
	}
	s.ignoreInapplicable(fs, v)
	s.Path = rules.PathForm{Slashes: rules.DecodeEscapedSlashes(o), StripDotsSpaces: v.boolean("strip_trailing_dots_spaces")}
	if v.str("policy") == "redis" {
		s.Redis = s.redis(v)
	}
	s.buildRules(o, v, errs)
	if len(errs.List) > 0 {
		return s, errs
	}
	s.needs = needsOf(s.Rules, s.Path, s.ServiceID)
	return s, nil
}

// refusedWithoutLogPhase refuses, when this plugin server runs without Kong's log phase
// (-no-log-phase), an algorithm or a usage_header that needs it, and reports whether it did.
func refusedWithoutLogPhase(o *conf.Obj) bool {
	if a := o.String("algorithm", ""); !logPhase && leasing(a) {
		o.Fail("algorithm", a+" needs Kong's log phase, to give each request's lease back when it ends, and this plugin server runs without it (-no-log-phase): start it without that flag, or choose another algorithm")
		return true
	}
	if !logPhase && o.String("usage_header", "") != "" {
		o.Fail("usage_header", "needs Kong's log phase, to charge each response's usage when it ends, and this plugin server runs without it (-no-log-phase): start it without that flag")
		return true
	}
	return false
}

// redis returns the cluster store's settings of policy redis: the connection, its addresses
// (redis_addrs, else redis_host and redis_port; an address without a port is on 6379), and
// the stack's, with a warning for each setting that another makes moot. The CA, certificate and
// key files are read when the store is made (see clusterStore).
func (s *settings) redis(v values) *stack.Redis {
	str, integer, boolean := v.str, v.integer, v.boolean
	rc := stack.Redis{Conn: redisstore.Conn{MasterName: str("redis_sentinel_master"), Cluster: boolean("redis_cluster"),
		Username: str("redis_username"), Password: str("redis_password"), DB: int(integer("redis_database")),
		TLS: boolean("redis_ssl"), SkipVerify: boolean("redis_ssl_skip_verify"), ServerName: str("redis_server_name")},
		CAFile: str("redis_ssl_ca_file"), CertFile: str("redis_ssl_cert_file"), KeyFile: str("redis_ssl_key_file"),
		Wait: int(integer("redis_wait_replicas")), Timeout: time.Duration(integer("redis_timeout")) * time.Millisecond, Prefix: str("redis_prefix")}
	addrs, _ := v["redis_addrs"].([]string)
	if len(addrs) == 0 {
		addrs = []string{net.JoinHostPort(strings.Trim(str("redis_host"), "[]"), strconv.FormatInt(integer("redis_port"), 10))}
	}
	for i, a := range addrs {
		if _, _, err := net.SplitHostPort(a); err != nil {
			addrs[i] = net.JoinHostPort(strings.Trim(a, "[]"), "6379")
		}
	}
	rc.Addrs = addrs
	rc.Conflicts(true, func(c stack.Conflict) {
		switch c {
		case stack.ClusterWithSentinel:
			s.warn("redis_cluster", "is ignored: redis_sentinel_master is set, so redis_addrs are Sentinels")
		case stack.WaitOnCluster:
			s.warn("redis_wait_replicas", "is ignored: WAIT cannot be routed on a Redis Cluster (it has no key)")
		}
	})
	return &rc
}

// needsOf returns the PDK calls a request costs under the rules rs, with the path form path,
// in an instance scoped to the service serviceID ("" for none).
func needsOf(rs []*rules.Rule, path rules.PathForm, serviceID string) needs {
	rd := rules.ReadsOf(rs)
	n := needs{IP: rd.Addr, Consumer: rd.Consumer, Service: rd.Route, Headers: rd.Headers,
		// Refusing escaped slashes needs every request's path, whatever the rules count by.
		Path: rd.Path || path.Slashes == rules.RejectSlashes}
	n.Identity = slices.ContainsFunc(rules.IdentityHeaders(rs), func(h string) bool { return h != credentialHeader })
	for _, r := range rs {
		n.Credential = n.Credential || slices.Contains(r.By, "header:"+credentialHeader)
		n.Leases = n.Leases || r.Leases
		n.Settles = n.Settles || r.Usage != nil
	}
	// A request without a consumer, credential, service or header counts by its address
	// instead (as Kong's rate-limiting falls back to the client IP): those rules need it too.
	n.IP = n.IP || n.Consumer || n.Credential || (n.Service && serviceID == "") || n.Headers
	return n
}

// values are the flat fields' values as decode reads them: int64, string, bool or []string,
// each field's default when absent; nil for an unset optional field.
type values map[string]any

func (v values) str(k string) string    { x, _ := v[k].(string); return x }
func (v values) integer(k string) int64 { x, _ := v[k].(int64); return x }
func (v values) boolean(k string) bool  { return v[k] == true }

// duration reads the duration field k in µs (its pattern lets through only durations: an
// error is not expected, but recorded).
func (v values) duration(o *conf.Obj, k string) int64 {
	us, reason := conf.ParseDuration(v.str(k))
	if reason != "" {
		o.Fail(k, reason)
	}
	return us
}
