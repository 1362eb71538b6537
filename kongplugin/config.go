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
	// EscapedSlashes says what %2F, %5C and '\' in a request's path are to the rules.
	EscapedSlashes rules.EscapedSlashes

	// Kong's extra keys.
	PluginID  string // __plugin_id: the instance's id, the same in every worker and node
	ServiceID string // service_id: set when the plugin is scoped to a service

	needs needs
}

// needs says which PDK calls a request costs: only what some rule counts by.
type needs struct {
	IP, Consumer, Credential, Path, Service bool
	Headers                                 bool // GetHeader, per header a rule reads
	Leases                                  bool // Log must give concurrency leases back
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
	v := map[string]any{} // every field's value, its default when absent; nil: an optional field unset
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
	str := func(k string) string { x, _ := v[k].(string); return x }
	integer := func(k string) int64 { x, _ := v[k].(int64); return x }
	boolean := func(k string) bool { return v[k] == true }

	by := str("limit_by")
	headerName, path := str("header_name"), str("path")
	s.EscapedSlashes = rules.DecodeEscapedSlashes(o)
	algorithm := str("algorithm")
	limit, window := integer("limit"), str("window")
	burst, warmup, subwindows := integer("burst"), str("warmup"), integer("subwindows")
	type extra struct {
		g      group
		limit  int64
		window string
		header string
	}
	var extras []extra
	for _, g := range groups {
		e := extra{g: g, limit: integer(g.Name + "_limit"), window: str(g.Name + "_window")}
		if g.Name == "device" {
			e.header = str("device_header")
		}
		extras = append(extras, e)
	}
	shadow := boolean("shadow")
	ban := str("ban")
	// The CA, certificate and key files are read when the store is made (see clusterStore).
	rc := stack.Redis{Conn: redisstore.Conn{MasterName: str("redis_sentinel_master"), Cluster: boolean("redis_cluster"),
		Username: str("redis_username"), Password: str("redis_password"), DB: int(integer("redis_database")),
		TLS: boolean("redis_ssl"), SkipVerify: boolean("redis_ssl_skip_verify"), ServerName: str("redis_server_name")},
		CAFile: str("redis_ssl_ca_file"), CertFile: str("redis_ssl_cert_file"), KeyFile: str("redis_ssl_key_file"),
		Wait: int(integer("redis_wait_replicas")), Timeout: time.Duration(integer("redis_timeout")) * time.Millisecond, Prefix: str("redis_prefix")}
	failClosed := boolean("fail_closed")
	nodes := integer("fallback_nodes")
	batchMax := integer("batch_max")
	batchAge := str("batch_max_age")
	hide := boolean("hide_client_headers")
	style := str("header_style")
	status := integer("error_code")
	message := str("error_message")

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

	// The rules, each decoded by shared/rules from a conf tree, so that the plugin validates
	// exactly as dianad does; their errors are renamed to the flat fields they came from.
	scope := s.PluginID
	if scope == "" {
		scope = "diana"
	}
	base := func(name, window string, limit int64) (*conf.Object, map[string]string) {
		lim := &conf.Object{}
		lim.Set("algorithm", algorithm)
		names := map[string]string{"limit.algorithm": "algorithm", "ban": "ban", "nodes": "fallback_nodes",
			"reply.status": "error_code", "reply.message": "error_message"}
		lf, wf := name+"_limit", name+"_window"
		if name == "main" {
			lf, wf = "limit", "window"
		}
		// The flat fields set the parameters of the algorithm's registry entry by their roles:
		// limit the amount (limit, rate, max), window its window (window, period, lease).
		kind, _ := rules.Algorithm(algorithm) // an unknown one is reported by the rule's decoder
		set := func(role rules.Role, v conf.Value, field string) {
			if p, ok := kind.Param(role); ok {
				lim.Set(p.Name, v)
				names["limit."+p.Name] = field
			}
		}
		set(rules.Amount, conf.Number(strconv.FormatInt(limit, 10)), lf)
		set(rules.Window, window, wf)
		set(rules.Warmup, warmup, "warmup")
		if subwindows > 0 { // absent from configs that predate it
			set(rules.SubWindows, conf.Number(strconv.FormatInt(subwindows, 10)), "subwindows")
		}
		if p, ok := kind.Param(rules.Burst); ok {
			names["limit."+p.Name] = "burst" // its default (the rate) too
			if burst > 0 && name == "main" {
				set(rules.Burst, conf.Number(strconv.FormatInt(burst, 10)), "burst")
			}
		}
		r := &conf.Object{}
		// The algorithm is part of the name, hence of the keys: switching algorithms must not
		// read one algorithm's state as another's. An unknown one is left out, so that its
		// error is the algorithm's, not the name's.
		if _, known := rules.Algorithm(algorithm); known {
			r.Set("name", scope+"."+name+"."+algorithm)
		} else {
			r.Set("name", scope+"."+name)
		}
		r.Set("limit", lim)
		if shadow {
			r.Set("action", "shadow")
		}
		r.Set("ban", ban)
		if s.Redis != nil {
			r.Set("mode", "cluster")
			switch {
			case failClosed:
				r.Set("on_error", "closed")
			case nodes > 0:
				r.Set("on_error", "local")
				r.Set("nodes", conf.Number(strconv.FormatInt(nodes, 10)))
			}
			if batchMax > 0 {
				b := &conf.Object{}
				b.Set("max", conf.Number(strconv.FormatInt(batchMax, 10)))
				b.Set("max_age", batchAge)
				r.Set("batch", b)
				names["batch"], names["batch.max_age"] = "batch_max", "batch_max_age"
			}
		}
		rep := &conf.Object{}
		rep.Set("status", conf.Number(strconv.FormatInt(status, 10)))
		rep.Set("message", message)
		if hide {
			style = rules.HeaderStyleNames[rules.NoHeaders]
		}
		rep.Set("headers", style)
		r.Set("reply", rep)
		return r, names
	}
	add := func(r *conf.Object, names map[string]string) {
		s.Rules = append(s.Rules, s.decodeRule(r, names, errs))
	}

	main, names := base("main", window, limit)
	var dim string
	switch by {
	case "header":
		dim = "header:" + headerName
		names["by[0]"] = "header_name"
	case "credential":
		dim = "header:" + credentialHeader
	case "service":
		dim = "route"
	default:
		dim = by
	}
	main.Set("by", []conf.Value{dim})
	if path != "" { // set only with limit_by path: ignored above otherwise
		m := &conf.Object{}
		m.Set("paths", []conf.Value{path})
		main.Set("match", m)
		names["match.paths"], names["match.paths[0]"] = "path", "path"
	}
	add(main, names)
	for _, e := range extras {
		if e.limit == 0 {
			continue
		}
		r, names := base(e.g.Name, e.window, e.limit)
		dim := e.g.By
		if e.header != "" {
			dim = "device:" + e.header
			names["by[0]"] = "device_header"
		}
		r.Set("by", []conf.Value{dim})
		add(r, names)
	}
	if len(errs.List) > 0 {
		return s, errs
	}
	for _, r := range s.Rules {
		s.needs.add(r.By)
		s.needs.Path = s.needs.Path || len(r.Match.Paths) > 0
		s.needs.Leases = s.needs.Leases || r.Leases
	}
	// Refusing escaped slashes needs every request's path, whatever the rules count by.
	s.needs.Path = s.needs.Path || s.EscapedSlashes == rules.RejectSlashes
	// A request without a consumer, credential, service or header counts by its address
	// instead (as Kong's rate-limiting falls back to the client IP): those rules need it too.
	s.needs.IP = s.needs.IP || s.needs.Consumer || s.needs.Credential || (s.needs.Service && s.ServiceID == "") || s.needs.Headers
	return s, nil
}

func (n *needs) add(by []string) {
	for _, b := range by {
		switch {
		case b == "ip":
			n.IP = true
		case b == "consumer":
			n.Consumer = true
		case b == "path":
			n.Path = true
		case b == "route":
			n.Service = true
		case b == "header:"+credentialHeader:
			n.Credential = true
		case strings.HasPrefix(b, "header:"), strings.HasPrefix(b, "device"):
			n.Headers = true
		}
	}
}

// decodeRule decodes one rule of the instance with shared/rules, and adapts what Kong's schema
// cannot refuse so that the rule limits, with a warning naming the field: a burst or warm-up
// beyond what the algorithm holds at this rate (a bound on a product of fields) is lowered to
// the most it holds; a batch the rule cannot take is dropped (decided per request, exactly); a
// limit that cannot be shared among fallback_nodes makes the rule refuse while Redis is down.
// Other errors are recorded on errs under the flat field names.
func (s *settings) decodeRule(r *conf.Object, names map[string]string, errs *conf.Errors) *rules.Rule {
	lim, _ := r.Get("limit")
	for {
		rerrs := &conf.Errors{}
		rule := rules.DecodeRule(conf.Read(r, rerrs))
		if len(rerrs.List) == 0 {
			return rule
		}
		e := rerrs.List[0]
		name, _ := r.Get("name")
		switch {
		case e.Path == "batch" || strings.HasPrefix(e.Path, "batch."):
			s.warn("batch_max", fmt.Sprintf("is ignored for the rule %s, which decides every request in Redis: %s", name, e.Reason))
			del(r, "batch")
			continue
		case e.Path == "nodes":
			s.warn("fallback_nodes", fmt.Sprintf("is ignored for the rule %s, which refuses requests while Redis is down (as fail_closed): %s", name, e.Reason))
			r.Set("on_error", "closed")
			del(r, "nodes")
			continue
		case names[e.Path] == "burst" || names[e.Path] == "warmup":
			if lowered(lim.(*conf.Object), strings.TrimPrefix(e.Path, "limit."), r) {
				v, _ := lim.(*conf.Object).Get(strings.TrimPrefix(e.Path, "limit."))
				s.warn(names[e.Path], fmt.Sprintf("is lowered to %v for the rule %s: %s", v, name, e.Reason))
				continue
			}
		}
		for _, e := range rerrs.List {
			f, ok := names[e.Path]
			if !ok {
				f = e.Path // not expected: every field the rules read is named above
			}
			errs.Add(f, e.Reason)
		}
		return rule
	}
}

// lowered sets the count or duration parameter param of lim to the largest value below its
// present one with which the rule r decodes, and reports whether there is one.
func lowered(lim *conf.Object, param string, r *conf.Object) bool {
	cur, _ := lim.Get(param)
	var hi int64
	var format func(int64) conf.Value
	switch c := cur.(type) {
	case conf.Number:
		hi, _ = strconv.ParseInt(string(c), 10, 64)
		format = func(n int64) conf.Value { return conf.Number(strconv.FormatInt(n, 10)) }
	case string:
		hi, _ = conf.ParseDuration(c)
		format = func(n int64) conf.Value { return conf.FormatDuration(n) }
	default:
		return false
	}
	ok := func(n int64) bool {
		lim.Set(param, format(n))
		errs := &conf.Errors{}
		rules.DecodeRule(conf.Read(r, errs))
		for _, e := range errs.List {
			if e.Path == "limit."+param {
				return false
			}
		}
		return true
	}
	lo := int64(0) // a leaky bucket's burst may be 0; a token bucket's, or a warm-up, not
	if !ok(lo) {
		if lo = 1; !ok(lo) {
			lim.Set(param, cur)
			return false
		}
	}
	for hi-lo > 1 { // ok(lo), not ok(hi)
		mid := lo + (hi-lo)/2
		if ok(mid) {
			lo = mid
		} else {
			hi = mid
		}
	}
	lim.Set(param, format(lo))
	return true
}

func del(o *conf.Object, key string) {
	if i := slices.Index(o.Keys, key); i >= 0 {
		o.Keys = slices.Delete(o.Keys, i, i+1)
		o.Vals = slices.Delete(o.Vals, i, i+1)
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
func applies(byName map[string]field, f field, v map[string]any) bool {
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
func (c check) fails(v map[string]any) string {
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
