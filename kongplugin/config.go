package main

import (
	"strconv"
	"strings"

	"github.com/diana-gw/diana/shared/conf"
	"github.com/diana-gw/diana/shared/rules"
)

// settings is a decoded, valid plugin config: the rules it limits with, and what a request
// must be asked for them.
type settings struct {
	Rules []*rules.Rule
	Redis *redisConf // nil with policy local
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

// redisConf is the Redis connection of policy redis; equal configs share one client.
type redisConf struct {
	Addrs      string // comma-separated, as a comparable map key
	MasterName string
	Cluster    bool
	Username   string
	Password   string
	DB         int
	TLS        bool
	SkipVerify bool
	ServerName string
	TimeoutMS  int64
	Prefix     string
}

// credentialHeader is the name under which the request's Kong credential id is handed to the
// rules, as the value of a "header" dimension. headerGetter answers it from the credential,
// never from the request, so a client cannot set it.
const credentialHeader = "X-Diana-Kong-Credential"

// decode reads a flat plugin config, as Kong sends it (defaults filled in, extra keys added)
// or as written in kong.yml (defaults absent), into rules, validating every field with
// shared/rules: errors name the flat field and the reason. On an error the settings returned
// hold only Kong's keys, to say which plugin the error is about. strict rejects keys the schema does
// not have (Kong does that itself before it sends a config; examples and tests ask for it).
func decode(doc conf.Value, strict bool) (*settings, error) {
	errs := &conf.Errors{}
	o := conf.Read(doc, errs)
	s := &settings{}
	s.PluginID = o.String("__plugin_id", "")
	s.ServiceID = o.String("service_id", "")
	d := fieldDefaults()
	str := func(k string) string { return o.String(k, strDefault(d[k])) }
	integer := func(k string, min, max int64) int64 { return o.Int(k, intDefault(d[k]), min, max) }
	boolean := func(k string) bool { return o.Bool(k, d[k] == true) }

	by := o.Enum("limit_by", "ip", limitBy...)
	headerName := o.String("header_name", "")
	path := o.String("path", "")
	s.EscapedSlashes = rules.DecodeEscapedSlashes(o)
	algorithm := str("algorithm")
	limit := integer("limit", 1, maxLimit)
	window := str("window")
	burst := integer("burst", 0, maxLimit)
	warmup := str("warmup")
	type extra struct {
		g      group
		limit  int64
		window string
		header string
	}
	var extras []extra
	for _, g := range groups {
		e := extra{g: g, limit: integer(g.Name+"_limit", 0, maxLimit), window: str(g.Name + "_window")}
		if g.Name == "device" {
			e.header = str("device_header")
		}
		extras = append(extras, e)
	}
	shadow := boolean("shadow")
	ban := str("ban")
	policy := o.Enum("policy", "local", "local", "redis")
	var rc redisConf
	host := str("redis_host")
	port := integer("redis_port", 1, 65535)
	addrs := o.Strings("redis_addrs")
	rc.MasterName = o.String("redis_sentinel_master", "")
	rc.Cluster = boolean("redis_cluster")
	rc.Username = o.String("redis_username", "")
	rc.Password = o.String("redis_password", "")
	rc.DB = int(integer("redis_database", 0, 1<<31-1))
	rc.TLS = boolean("redis_ssl")
	rc.SkipVerify = boolean("redis_ssl_skip_verify")
	rc.ServerName = o.String("redis_server_name", "")
	rc.TimeoutMS = integer("redis_timeout", 1, 60000)
	rc.Prefix = str("redis_prefix")
	failClosed := boolean("fail_closed")
	nodes := integer("fallback_nodes", 0, 10000)
	batchMax := integer("batch_max", 0, rules.MaxBatch)
	batchAge := str("batch_max_age")
	hide := boolean("hide_client_headers")
	style := o.Enum("header_style", strDefault(d["header_style"]), rules.HeaderStyleNames[:rules.NoHeaders]...)
	status := o.Int("error_code", 429, 400, 599)
	message := o.String("error_message", rules.DefaultMessage)
	if strict {
		o.Done()
	}
	if len(errs.List) > 0 {
		return s, errs // the rules would repeat these errors
	}

	if policy == "redis" {
		if len(addrs) == 0 {
			if host == "" {
				o.Fail("redis_host", "cannot be empty with policy redis and no redis_addrs")
			}
			addrs = []string{host + ":" + strconv.FormatInt(port, 10)}
		}
		for _, a := range addrs {
			if !strings.Contains(a, ":") || strings.HasPrefix(a, ":") || strings.HasSuffix(a, ":") {
				o.Fail("redis_addrs", "each address must be host:port, got "+strconv.Quote(a))
			}
		}
		if rc.MasterName != "" && rc.Cluster {
			o.Fail("redis_cluster", "cannot be combined with redis_sentinel_master")
		}
		if rc.Prefix == "" {
			o.Fail("redis_prefix", "cannot be empty: keys need a prefix")
		}
		rc.Addrs = strings.Join(addrs, ",")
		s.Redis = &rc
	}
	if batchMax > 0 && s.Redis == nil {
		o.Fail("batch_max", "applies only with policy redis: a local limit already decides in this process")
	}
	if failClosed && nodes > 0 {
		o.Fail("fallback_nodes", "cannot be combined with fail_closed: while Redis is down, either refuse (fail_closed) or limit locally (fallback_nodes)")
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
		if burst > 0 && name == "main" {
			set(rules.Burst, conf.Number(strconv.FormatInt(burst, 10)), "burst")
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
		rerrs := &conf.Errors{}
		rule := rules.DecodeRule(conf.Read(r, rerrs))
		for _, e := range rerrs.List {
			f, ok := names[e.Path]
			if !ok {
				f = e.Path // not expected: every field the rules read is named above
			}
			errs.Add(f, e.Reason)
		}
		s.Rules = append(s.Rules, rule)
	}

	main, names := base("main", window, limit)
	var dim string
	switch by {
	case "header":
		if headerName == "" {
			o.Fail("header_name", "is required when limit_by is header")
		}
		dim = "header:" + headerName
		names["by[0]"] = "header_name"
	case "credential":
		dim = "header:" + credentialHeader
	case "service":
		dim = "route"
	default:
		dim = by
	}
	if by != "header" && headerName != "" && strict {
		o.Fail("header_name", "applies only when limit_by is header")
	}
	main.Set("by", []conf.Value{dim})
	if path != "" {
		if by != "path" {
			o.Fail("path", "applies only when limit_by is path")
		} else {
			m := &conf.Object{}
			m.Set("paths", []conf.Value{path})
			main.Set("match", m)
			names["match.paths"], names["match.paths[0]"] = "path", "path"
		}
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

// fieldDefaults returns every field's default as the dump states it.
func fieldDefaults() map[string]any {
	d := map[string]any{}
	for _, f := range resolvedFields() {
		d[f.Name] = f.Default
	}
	return d
}

func strDefault(v any) string {
	s, _ := v.(string)
	return s
}

func intDefault(v any) int64 {
	n, _ := v.(int64)
	return n
}
