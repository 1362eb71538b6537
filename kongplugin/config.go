package main

import (
	"fmt"
	"math"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/diana-gw/diana/shared/algos"
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
// field table as Kong checks it (readField, then the entity checks); a field that does not apply
// to the chosen mode is ignored with a warning; then the rules are validated by shared/rules,
// their errors renamed to the flat fields they came from. On an error the settings returned hold
// only Kong's keys, to say which plugin the error is about. strict rejects keys the schema does
// not have (Kong does that itself before it sends a config; examples and tests ask for it).
func decode(doc conf.Value, strict bool) (*settings, error) {
	errs := &conf.Errors{}
	o := conf.Read(doc, errs)
	s := &settings{}
	s.PluginID = o.String("__plugin_id", "")
	s.ServiceID = o.String("service_id", "")
	fs := resolvedFields()
	if a := o.String("algorithm", ""); !logPhase && leasing(a) {
		o.Fail("algorithm", a+" needs Kong's log phase, to give each request's lease back when it ends, and this plugin server runs without it (-no-log-phase): start it without that flag, or choose another algorithm")
		return s, errs
	}
	if !logPhase && o.String("usage_header", "") != "" {
		o.Fail("usage_header", "needs Kong's log phase, to charge each response's usage when it ends, and this plugin server runs without it (-no-log-phase): start it without that flag")
		return s, errs
	}
	v := values{} // every field's value, its default when absent; nil: an optional field unset
	for _, f := range fs {
		v[f.Name] = readField(o, doc, f)
	}
	if strict {
		o.Done()
	}
	if len(errs.List) > 0 {
		return s, errs // the checks and the rules would repeat these errors
	}
	for _, c := range checks(fs) {
		if reason := c.fails(v); reason != "" {
			o.Fail(c.Then, reason)
		}
	}
	if len(errs.List) > 0 {
		return s, errs
	}
	byName := map[string]field{}
	for _, f := range fs {
		byName[f.Name] = f
	}
	for _, f := range fs {
		if !applies(byName, f, v) && !isDefault(f, v[f.Name]) {
			s.warn(f.Name, "is ignored: it applies only when "+f.Applies.String())
			v[f.Name] = f.Default
		}
	}
	str, integer, boolean := v.str, v.integer, v.boolean
	s.Path = rules.PathForm{Slashes: rules.DecodeEscapedSlashes(o), StripDotsSpaces: v.boolean("strip_trailing_dots_spaces")}
	// The CA, certificate and key files are read when the store is made (see clusterStore).
	rc := stack.Redis{Conn: redisstore.Conn{MasterName: str("redis_sentinel_master"), Cluster: boolean("redis_cluster"),
		Username: str("redis_username"), Password: str("redis_password"), DB: int(integer("redis_database")),
		TLS: boolean("redis_ssl"), SkipVerify: boolean("redis_ssl_skip_verify"), ServerName: str("redis_server_name")},
		CAFile: str("redis_ssl_ca_file"), CertFile: str("redis_ssl_cert_file"), KeyFile: str("redis_ssl_key_file"),
		Wait: int(integer("redis_wait_replicas")), Timeout: time.Duration(integer("redis_timeout")) * time.Millisecond, Prefix: str("redis_prefix")}

	if str("policy") == "redis" {
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
		s.Redis = &rc
	}

	s.buildRules(o, v, errs)
	if len(errs.List) > 0 {
		return s, errs
	}
	rd := rules.ReadsOf(s.Rules)
	s.needs = needs{IP: rd.Addr, Consumer: rd.Consumer, Service: rd.Route, Headers: rd.Headers,
		// Refusing escaped slashes needs every request's path, whatever the rules count by.
		Path: rd.Path || s.Path.Slashes == rules.RejectSlashes}
	s.needs.Identity = slices.ContainsFunc(rules.IdentityHeaders(s.Rules), func(h string) bool { return h != credentialHeader })
	for _, r := range s.Rules {
		s.needs.Credential = s.needs.Credential || slices.Contains(r.By, "header:"+credentialHeader)
		s.needs.Leases = s.needs.Leases || r.Leases
		s.needs.Settles = s.needs.Settles || r.Usage != nil
	}
	// A request without a consumer, credential, service or header counts by its address
	// instead (as Kong's rate-limiting falls back to the client IP): those rules need it too.
	s.needs.IP = s.needs.IP || s.needs.Consumer || s.needs.Credential || (s.needs.Service && s.ServiceID == "") || s.needs.Headers
	return s, nil
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

// limitFields name the flat fields one limit of an instance is read from: the main limit's, or
// an extra group's.
type limitFields struct {
	name          string // main, or the group's name: part of the rule's name
	limit, window string // its amount and its window
	by            string // the field its by[0] comes from
}

// buildRules builds the instance's rules: one for the main limit and one for each extra limit
// set, each a rules.Spec filled from the flat fields and built by shared/rules, so that the
// plugin validates exactly as dianad does. Errors go to errs under the flat fields' names.
func (s *settings) buildRules(o *conf.Obj, v values, errs *conf.Errors) {
	main := limitFields{name: "main", limit: "limit", window: "window", by: "header_name"}
	sp := s.spec(o, v, main)
	switch by := v.str("limit_by"); by {
	case "header":
		sp.By = []string{"header:" + v.str("header_name")}
	case "credential":
		sp.By = []string{"header:" + credentialHeader}
	case "service":
		sp.By = []string{"route"}
	default:
		sp.By = []string{by}
	}
	if path := v.str("path"); path != "" { // set only with limit_by path: ignored otherwise
		sp.Match.Paths = []string{path}
	}
	if b := v.integer("burst"); b > 0 { // the main limit's only
		s.setRole(&sp, rules.Burst, b)
	}
	s.add(sp, main, errs)
	for _, g := range groups {
		lf := limitFields{name: g.Name, limit: g.Name + "_limit", window: g.Name + "_window", by: "device_header"}
		if v.integer(lf.limit) == 0 {
			continue
		}
		sp := s.spec(o, v, lf)
		sp.By = []string{g.By}
		if g.Name == "device" {
			sp.By = []string{"device:" + v.str("device_header")}
		}
		s.add(sp, lf, errs)
	}
}

// spec returns the rule of the limit lf but for what it counts by: the instance's algorithm
// with lf's amount and window, and the settings every limit of the instance shares.
func (s *settings) spec(o *conf.Obj, v values, lf limitFields) rules.Spec {
	sp := rules.NewSpec()
	algorithm := v.str("algorithm")
	scope := s.PluginID
	if scope == "" {
		scope = "diana"
	}
	// The algorithm is part of the name, hence of the keys: switching algorithms must not read
	// one algorithm's state as another's. An unknown one is refused by the field table.
	sp.Name = scope + "." + lf.name + "." + algorithm
	// The flat fields set the parameters of the algorithm's registry entry by their roles:
	// limit the amount (limit, rate, max), window its window (window, period, lease).
	sp.Limit = rules.LimitSpec{Algorithm: algorithm, Params: rules.Params{}}
	s.setRole(&sp, rules.Amount, v.integer(lf.limit))
	s.setRole(&sp, rules.Window, v.duration(o, lf.window))
	s.setRole(&sp, rules.Warmup, v.duration(o, "warmup"))
	if n := v.integer("subwindows"); n > 0 { // absent from configs that predate it
		s.setRole(&sp, rules.SubWindows, n)
	}
	if v.boolean("shadow") {
		sp.Action = rules.Shadow
	}
	sp.Ban = v.duration(o, "ban")
	if h := v.str("usage_header"); h != "" {
		sp.Usage = &rules.UsageSpec{Header: h, Estimate: v.integer("usage_estimate"), Fallback: -1}
		if f, ok := v["usage_fallback"].(int64); ok {
			sp.Usage.Fallback = f
		}
	}
	if s.Redis != nil {
		sp.Mode = rules.Cluster
		switch nodes := v.integer("fallback_nodes"); {
		case v.boolean("fail_closed"):
			sp.OnError = rules.FailClosed
		case nodes > 0:
			sp.OnError, sp.Nodes = rules.FailLocal, nodes
		}
		if m := v.integer("batch_max"); m > 0 {
			sp.Batch = &rules.BatchSpec{Max: m, MaxAge: v.duration(o, "batch_max_age")}
		}
	}
	sp.Reply.Status, sp.Reply.Message = int(v.integer("error_code")), v.str("error_message")
	sp.Reply.Headers = rules.HeaderStyle(slices.Index(rules.HeaderStyleNames[:], v.str("header_style")))
	if v.boolean("hide_client_headers") {
		sp.Reply.Headers = rules.NoHeaders
	}
	return sp
}

// setRole sets the parameter of sp's algorithm that has the role, if it has one.
func (s *settings) setRole(sp *rules.Spec, role rules.Role, v int64) {
	kind, _ := rules.Algorithm(sp.Limit.Algorithm)
	if p, ok := kind.Param(role); ok {
		sp.Limit.Params[p.Name] = v
	}
}

// field returns the flat field that an error of lf's rule, at path, comes from.
func (lf limitFields) field(sp *rules.Spec, path string) string {
	switch {
	case path == "ban":
		return path
	case path == "name": // the rule's name is the instance's id and fixed words
		return "__plugin_id"
	case path == "nodes", path == "on_error":
		return "fallback_nodes"
	case path == "reply.status":
		return "error_code"
	case path == "reply.message":
		return "error_message"
	case path == "batch.max_age":
		return "batch_max_age"
	case strings.HasPrefix(path, "usage."):
		return "usage_" + strings.TrimPrefix(path, "usage.")
	case strings.HasPrefix(path, "batch"):
		return "batch_max"
	case strings.HasPrefix(path, "by["):
		return lf.by
	case strings.HasPrefix(path, "match.paths"):
		return "path"
	}
	kind, _ := rules.Algorithm(sp.Limit.Algorithm)
	for _, p := range kind.Params {
		if path != "limit."+p.Name {
			continue
		}
		switch p.Role {
		case rules.Amount:
			return lf.limit
		case rules.Window:
			return lf.window
		case rules.Burst, rules.Warmup, rules.SubWindows:
			return string(p.Role)
		}
	}
	return "algorithm"
}

// add builds the rule sp, and adapts what Kong's schema cannot refuse so that the rule limits,
// with a warning naming the field: a burst or warm-up beyond what the algorithm holds at this
// rate (a bound on a product of fields) is lowered to the most it holds; a batch the rule cannot
// take is dropped (decided per request, exactly); a limit that cannot be shared among
// fallback_nodes makes the rule refuse while Redis is down. Other errors are recorded on errs
// under the flat fields they came from.
func (s *settings) add(sp rules.Spec, lf limitFields, errs *conf.Errors) {
	s.lower(&sp, lf)
	for {
		r, err := sp.Rule()
		if err == nil {
			for _, w := range r.Warnings("") {
				s.warn(lf.field(&sp, w.Path), fmt.Sprintf("for the rule %s: %s", sp.Name, w.Reason))
			}
			s.Rules = append(s.Rules, r)
			return
		}
		e := err.(*conf.Errors).List[0]
		switch {
		case sp.Batch != nil && (e.Path == "batch" || strings.HasPrefix(e.Path, "batch.")):
			s.warn("batch_max", fmt.Sprintf("is ignored for the rule %s, which decides every request in Redis: %s", sp.Name, e.Reason))
			sp.Batch = nil
			continue
		case sp.Usage != nil && (strings.Contains(e.Reason, rules.CannotSettle) || e.Path == "usage.header"):
			s.warn("usage_header", fmt.Sprintf("is ignored for the rule %s, whose requests then cost 1 each: %s", sp.Name, e.Reason))
			sp.Usage = nil
			continue
		case e.Path == "nodes" && sp.OnError == rules.FailLocal:
			s.warn("fallback_nodes", fmt.Sprintf("is ignored for the rule %s, which refuses requests while Redis is down (as fail_closed): %s", sp.Name, e.Reason))
			sp.OnError, sp.Nodes = rules.FailClosed, 1
			continue
		}
		for _, e := range err.(*conf.Errors).List {
			errs.Add(lf.field(&sp, e.Path), e.Reason)
		}
		return
	}
}

// lower lowers each parameter of sp's limit that is above the largest the algorithm takes at
// the others' values (its Largest) to that largest, with a warning.
func (s *settings) lower(sp *rules.Spec, lf limitFields) {
	kind, ok := rules.Algorithm(sp.Limit.Algorithm)
	if !ok {
		return
	}
	for _, p := range kind.Params {
		if p.Largest == nil {
			continue
		}
		resolved := kind.Resolve(sp.Limit.Params)
		most := p.Largest(resolved)
		if resolved[p.Name] <= most || most < p.Min {
			continue
		}
		_, err := kind.Build(resolved, 1)
		pe, ok := err.(*algos.ParamError)
		if !ok || pe.Param != p.Name {
			continue // another parameter is wrong: its error says so
		}
		sp.Limit.Params[p.Name] = most
		shown := strconv.FormatInt(most, 10)
		if p.Type == rules.Duration {
			shown = conf.FormatDuration(most)
		}
		s.warn(lf.field(sp, "limit."+p.Name), fmt.Sprintf("is lowered to %s for the rule %s: %s", shown, sp.Name, pe.Reason))
	}
}

// isDefault reports whether x, a value of f, is unset or its default.
func isDefault(f field, x any) bool {
	if l, ok := x.([]string); ok {
		return len(l) == 0
	}
	return x == nil || equal(f.Default, x)
}

// warn records, that the config was taken otherwise than written.
func (s *settings) warn(field, reason string) {
	s.Warnings = append(s.Warnings, field+": "+reason)
}

// readField reads one field as Kong validates it: its type, between, one_of, len_min (1 for a
// string unless Empty), match_any and match_none; an absent or null field is its default. It
// returns int64, string, bool or []string, or nil for an unset optional field.
func readField(o *conf.Obj, doc conf.Value, f field) any {
	var raw conf.Value
	if d, ok := doc.(*conf.Object); ok {
		raw, _ = d.Get(f.Name)
	}
	if raw == nil {
		o.String(f.Name, "") // marks a null as read, for strict decoding
		if f.Type == "array" {
			return []string(nil) // every array defaults to empty
		}
		return f.Default
	}
	switch f.Type {
	case "integer":
		min, max := int64(math.MinInt64), int64(math.MaxInt64)
		if f.Min != nil {
			min, max = *f.Min, *f.Max
		}
		return o.Int(f.Name, 0, min, max)
	case "boolean":
		return o.Bool(f.Name, false)
	case "array":
		if e, ok := raw.(*conf.Object); ok && len(e.Keys) == 0 {
			// Lua's cjson encodes an empty table as {} unless it carries the array metatable:
			// Kong may send an empty list so.
			o.Raw(f.Name) // marks it read, for strict decoding
			return []string(nil)
		}
		l := o.Strings(f.Name)
		for i, e := range l {
			if reason := checkString(f, e); reason != "" {
				o.Fail(f.Name+"["+strconv.Itoa(i)+"]", reason)
			}
		}
		return l
	}
	v := o.String(f.Name, "")
	if reason := checkString(f, v); reason != "" {
		o.Fail(f.Name, reason)
	}
	return v
}

// checkString returns why s is not a value of f, or "".
func checkString(f field, s string) string {
	switch {
	case s == "" && !f.Empty:
		return "cannot be empty (length must be at least 1)"
	case s == "":
		return ""
	case f.OneOf != nil && !slices.Contains(f.OneOf, s):
		return "must be one of " + strings.Join(f.OneOf, ", ") + ", got " + strconv.Quote(s)
	}
	for _, n := range f.None {
		if luaMatch(n.Pattern, s) {
			return n.Err + ", got " + strconv.Quote(s)
		}
	}
	if f.Match != nil && !slices.ContainsFunc(f.Match.Patterns, func(p string) bool { return luaMatch(p, s) }) {
		return f.Match.Err + ", got " + strconv.Quote(s)
	}
	return ""
}

var luaPatterns sync.Map // Lua pattern → *regexp.Regexp

// luaMatch reports whether s matches the Lua pattern p (a pattern that does not translate
// matches nothing: TestPatterns checks that every pattern of the schema does).
func luaMatch(p, s string) bool {
	re, ok := luaPatterns.Load(p)
	if !ok {
		r, err := luaRegexp(p)
		if err != nil {
			return false
		}
		re, _ = luaPatterns.LoadOrStore(p, r)
	}
	return re.(*regexp.Regexp).MatchString(s)
}

// applies reports whether f applies given the values v: its condition holds, and the field
// of the condition applies itself.
func applies(byName map[string]field, f field, v values) bool {
	for c := f.Applies; c != nil; c = byName[c.Field].Applies {
		if !c.holds(v[c.Field]) {
			return false
		}
	}
	return true
}

func (c *cond) holds(x any) bool {
	return slices.ContainsFunc(c.OneOf, func(w any) bool { return equal(w, x) })
}

// equal compares a value of the schema (int, int64, string, bool) with a decoded one.
func equal(w, x any) bool {
	if i, ok := w.(int); ok {
		w = int64(i)
	}
	return w == x
}

func (c *cond) String() string {
	var vs []string
	for _, x := range c.OneOf {
		vs = append(vs, fmt.Sprint(x))
	}
	return c.Field + " is " + strings.Join(vs, " or ")
}

// fails returns why the values v fail the check, or "".
func (c check) fails(v values) string {
	if !c.If.holds(v[c.If.Field]) {
		return ""
	}
	x := v[c.Then]
	switch {
	case x == nil && c.Required:
		return "is required when " + c.If.String()
	case x == nil:
		return ""
	case c.Eq != nil && !equal(c.Eq, x):
		return fmt.Sprintf("must be %v when %s, got %v", c.Eq, c.If.String(), x)
	case c.Between != nil:
		if n, _ := x.(int64); n < c.Between[0] || n > c.Between[1] {
			return fmt.Sprintf("must be between %d and %d when %s, got %d", c.Between[0], c.Between[1], c.If.String(), n)
		}
	}
	return ""
}
