// Package rls is Envoy's rate limit service (envoy.service.ratelimit.v3.RateLimitService) in
// dianad, a drop-in for envoyproxy/ratelimit: its descriptor config format read as is, its
// lookup, its answers, with the decisions made by Diana's stores.
//
// The design, in the order a request meets it:
//   - Wire: gRPC's proto codec. A codec of its own (protowire, no reflection), measured alone,
//     gained too little to keep, and was removed (docs/performance.md).
//   - Config (Parse) is envoyproxy/ratelimit's descriptor format as of its main: every field
//     its loader accepts (quota_mode, metadata, shadow_mode, detailed_metric, value_to_metric,
//     share_threshold, replaces, unlimited, wildcards anywhere in a value, its seven units) and
//     unit_multiplier as Envoy PR #47307 defines it (the window is that many units; the answer
//     carries it as field 4 of the limit, which go-control-plane does not declare yet). A field
//     the loader does not know is refused, naming it (conf.Obj.Done).
//   - Lookup (Config.lookup) is its GetLimit: key_value, then a wildcard, then the key alone,
//     level by level, with its stats keys.
//   - Counting: a plain rate_limit counts as envoyproxy/ratelimit does, with INCRBY semantics:
//     every hit counts, over the limit or not, and the service compares the count with
//     requests_per_unit (algos.Counter, whose Lua script costs Redis one HINCRBY in the common
//     case; its keys end in "counter" where a limit's name its algorithm). This is what makes a charge that arrives after the response
//     (hits_addend with Envoy's apply_on_stream_done) bind: the checks after a charge that went
//     over answer OVER_LIMIT until the window ends. Diana's extensions beside rate_limit
//     (algorithm: any algorithm of shared/rules whose amount and window come from
//     requests_per_unit and unit, by name or as an object with its other parameters; batch)
//     count with Diana's semantics instead: a denied request takes nothing. Algorithms the
//     service cannot run are refused naming the field: concurrency (it holds a slot until the
//     request ends, and the service is never told that) and adaptive (it learns from latencies
//     the service never sees).
//   - Memory: a request's working memory (its descriptors on their way, the store's ops) is
//     reused across requests (scratch), as the stores keep no pointer to an op once Decide
//     returns; the answer's statuses are allocated with their durations.
//   - Answer (Service.response): the statuses, the overall code (quota_mode: refused only when
//     every quota descriptor is over), the RateLimit headers and the dynamic metadata
//     (Options.DynamicMetadata: the descriptors, and the metadata of those that passed).
package rls

import (
	"errors"
	"slices"
	"strconv"
	"strings"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/diana-gw/diana/config"
	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/conf"
	"github.com/diana-gw/diana/shared/rules"
)

// Units are envoyproxy/ratelimit's units, by their config names, with their length in seconds
// (its utils.UnitToDivider: a month is 30 days, a year 365).
var Units = []struct {
	Name    string
	Unit    pb.RateLimitResponse_RateLimit_Unit
	Seconds int64
}{
	{"second", pb.RateLimitResponse_RateLimit_SECOND, 1},
	{"minute", pb.RateLimitResponse_RateLimit_MINUTE, 60},
	{"hour", pb.RateLimitResponse_RateLimit_HOUR, 3600},
	{"day", pb.RateLimitResponse_RateLimit_DAY, 86400},
	{"week", pb.RateLimitResponse_RateLimit_WEEK, 7 * 86400},
	{"month", pb.RateLimitResponse_RateLimit_MONTH, 30 * 86400},
	{"year", pb.RateLimitResponse_RateLimit_YEAR, 365 * 86400},
}

// unitSeconds returns the length of u in seconds, 0 for an unknown unit.
func unitSeconds(u pb.RateLimitResponse_RateLimit_Unit) int64 {
	for _, x := range Units {
		if x.Unit == u {
			return x.Seconds
		}
	}
	return 0
}

// Limit is a rate_limit block of the config.
type Limit struct {
	FullKey         string // the stats key, domain.key_value.key...: the metrics' rule label
	RequestsPerUnit uint32
	Unit            pb.RateLimitResponse_RateLimit_Unit
	// Multiplier is rate_limit.unit_multiplier (Envoy PR #47307): the window is Multiplier
	// units; 1 when absent.
	Multiplier int64
	Window     int64    // seconds: the unit's times Multiplier
	Name       string   // rate_limit.name, for replaces
	Replaces   []string // the names of the limits this one replaces
	Unlimited  bool
	Shadow     bool
	// Quota is quota_mode: over its limit, the descriptor's status is OVER_LIMIT but the request
	// is refused only when every quota_mode descriptor of it is over (and no other one is).
	Quota    bool
	Detailed bool // detailed_metric: the metric key holds the request's values
	// Metadata is the descriptor's metadata, merged into the dynamic metadata of an answer in
	// which the descriptor passed.
	Metadata *structpb.Struct
	// Alg counts the limit, nil when unlimited or when requests_per_unit is 0 (every hit is over
	// the limit, as there); Fallback is its share per node for on_error local. Without Diana's
	// fields, Alg is a counter (counter is true, algos.Counter) that counts every hit, over the
	// limit or not, as envoyproxy/ratelimit's INCRBY does, the limit compared by the service;
	// with them, Alg is the named algorithm, which takes nothing of a denied hit.
	Alg, Fallback algos.Algorithm
	counter       bool
	Algorithm     string
	proto         *pb.RateLimitResponse_RateLimit
}

// node is one level of a domain's descriptor tree.
type node struct {
	children      map[string]*node // by "key_value", or "key" for a descriptor without a value
	wildcards     []wildcard       // the children whose name holds a '*', in config order
	limit         *Limit
	valueToMetric bool
	share         string // share_threshold: the wildcard value ("files/*") every match counts under
}

// wildcard is a child's name holding '*', split at them once: each '*' matches any run of
// characters, empty included, as envoyproxy/ratelimit's wildcardMatch.
type wildcard struct {
	name  string
	parts []string
}

// byName returns the child of n named kv ("key_value"), or else the first wildcard child that
// matches it, with the wildcard's name; nil if none. kv is bytes so that a lookup by value
// makes no string.
func (n *node) byName(kv []byte) (c *node, wild string) {
	if c := n.children[string(kv)]; c != nil {
		return c, ""
	}
	if len(n.wildcards) == 0 {
		return nil, ""
	}
	name := string(kv)
	for _, w := range n.wildcards {
		if w.match(name) {
			return n.children[w.name], w.name
		}
	}
	return nil, ""
}

// match reports whether name ("key_value") matches w.
func (w wildcard) match(name string) bool {
	p := w.parts
	if len(p) == 1 {
		return p[0] == name
	}
	first, last := p[0], p[len(p)-1]
	if len(name) < len(first)+len(last) || !strings.HasPrefix(name, first) || !strings.HasSuffix(name, last) {
		return false
	}
	rest := name[len(first) : len(name)-len(last)]
	for _, part := range p[1 : len(p)-1] {
		i := strings.Index(rest, part)
		if i < 0 {
			return false
		}
		rest = rest[i+len(part):]
	}
	return true
}

// Config is a set of domains read from a config directory. It is immutable.
type Config struct {
	domains map[string]*node
	files   map[string]string // domain → the file it was read from
}

// Domains returns the number of domains.
func (c *Config) Domains() int { return len(c.domains) }

// ParseOptions say how limits are counted.
type ParseOptions struct {
	// Nodes divides every limit into a node's share for on_error local; default 1.
	Nodes int64
	// Cluster says the limits are counted in Redis, where Diana's batch extension applies.
	Cluster bool
	// MergeDomains merges the files of one domain, as envoyproxy/ratelimit's
	// MERGE_DOMAIN_CONFIG: their top-level descriptors must differ. Otherwise a domain in two
	// files is refused.
	MergeDomains bool
}

// Diana's extensions, next to rate_limit: algorithmField names the algorithm of shared/rules
// that counts the limit instead of envoyproxy/ratelimit's fixed window, by its name or as an
// object with its name and its other parameters; batchField puts it in batched mode (cluster
// mode only), as a rule's batch field does.
const (
	algorithmField = "algorithm"
	batchField     = "batch"
)

// extensions are Diana's fields beside rate_limit, which apply only to a counted limit.
var extensions = []string{algorithmField, batchField}

// MaxMultiplier bounds rate_limit.unit_multiplier so that a window is at most algos.MaxSpan
// (10 years) whatever its unit; the window of unit × multiplier is checked too.
const MaxMultiplier = algos.MaxSpan / algos.Second

// Parse reads the descriptor config files into one Config, refusing a duplicate domain. Every
// error names the file and the field.
func Parse(files []File, o ParseOptions) (*Config, error) {
	if o.Nodes < 1 {
		o.Nodes = 1
	}
	c := &Config{domains: map[string]*node{}, files: map[string]string{}}
	var all []error
	for _, f := range files {
		errs := &conf.Errors{Source: f.Name}
		domain, root := parseFile(f, o, errs)
		prev, dup := c.files[domain]
		if dup && root != nil && !o.MergeDomains {
			errs.Add("domain", "duplicate domain "+strconv.Quote(domain)+", also in "+prev)
		}
		if dup && root != nil && o.MergeDomains && errs.Err() == nil {
			merge(c.domains[domain], root, domain, prev, errs)
		}
		if err := errs.Err(); err != nil {
			all = append(all, err)
			continue
		}
		if !dup {
			c.domains[domain], c.files[domain] = root, f.Name
		}
	}
	if len(all) > 0 {
		return nil, errors.Join(all...)
	}
	return c, nil
}

// merge adds the top-level descriptors of root, another file's of domain, to into (the one of
// prev), refusing one that into has already, as envoyproxy/ratelimit does.
func merge(into, root *node, domain, prev string, errs *conf.Errors) {
	names := make([]string, 0, len(root.children))
	for name := range root.children {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if _, dup := into.children[name]; dup {
			errs.Add("descriptors", "duplicate descriptor "+strconv.Quote(domain+"."+name)+", also in "+prev)
		}
	}
	if errs.Err() != nil {
		return
	}
	for name, n := range root.children {
		into.children[name] = n
	}
	into.wildcards = append(into.wildcards, root.wildcards...)
}

// File is one descriptor config file's name and contents.
type File struct {
	Name string
	Data []byte
}

// parseFile reads one file: a domain and its descriptors.
func parseFile(f File, o ParseOptions, errs *conf.Errors) (string, *node) {
	doc, err := config.Decode(f.Data, f.Name)
	if err != nil {
		errs.Source = "" // the decoder's error names the file already
		errs.Add("", err.Error())
		return "", nil
	}
	valuesAsText(doc)
	r := conf.Read(doc, errs)
	r.Require("domain")
	domain := r.String("domain", "")
	if r.Has("domain") && domain == "" {
		r.Fail("domain", "cannot be empty")
	}
	root := &node{children: map[string]*node{}}
	p := &parser{o: o}
	p.descriptors(r, root, domain+".")
	r.Done()
	return domain, root
}

type parser struct{ o ParseOptions }

// descriptors reads the descriptors list of o into n; prefix is the stats key so far.
func (p *parser) descriptors(o *conf.Obj, n *node, prefix string) {
	for _, d := range o.List("descriptors") {
		d.Require("key")
		key := d.String("key", "")
		if d.Has("key") && key == "" {
			d.Fail("key", "cannot be empty")
		}
		value := d.String("value", "")
		name := key
		if value != "" {
			name += "_" + value
		}
		full := prefix + name
		if _, dup := n.children[name]; dup {
			d.Fail("key", "duplicate descriptor "+strconv.Quote(full)+" (the same key and value at the same level)")
		}
		child := &node{children: map[string]*node{}}
		child.valueToMetric = d.Bool("value_to_metric", false)
		if d.Bool("share_threshold", false) {
			if !strings.Contains(name, "*") {
				d.Fail("share_threshold", "applies only to a wildcard value (holding '*'), got "+strconv.Quote(value))
			}
			child.share = value
		}
		flags := Limit{Shadow: d.Bool("shadow_mode", false), Quota: d.Bool("quota_mode", false), Detailed: d.Bool("detailed_metric", false)}
		flags.Metadata = metadata(d)
		if d.Has("rate_limit") {
			child.limit = p.limit(d, full, flags)
		} else {
			for _, f := range extensions {
				if d.Has(f) {
					d.Fail(f, "applies only beside rate_limit")
				}
			}
		}
		if strings.Contains(name, "*") {
			n.wildcards = append(n.wildcards, wildcard{name: name, parts: strings.Split(name, "*")})
		}
		p.descriptors(d, child, full+".")
		d.Done()
		if key != "" {
			n.children[name] = child
		}
	}
}

// limit reads the rate_limit block of d; flags holds the descriptor's other settings.
func (p *parser) limit(d *conf.Obj, full string, flags Limit) *Limit {
	lo := d.Obj("rate_limit")
	l := &flags
	l.FullKey = full
	l.Unlimited = lo.Bool("unlimited", false)
	l.Name = lo.String("name", "")
	l.Replaces = append(l.Replaces, replaces(lo, l.Name)...)
	rpu := rate(lo, l)
	lo.Done()
	l.RequestsPerUnit = uint32(rpu)
	l.proto = &pb.RateLimitResponse_RateLimit{RequestsPerUnit: l.RequestsPerUnit, Unit: l.Unit, Name: l.Name}
	if l.Multiplier > 1 {
		setMultiplier(l.proto, l.Multiplier)
	}
	if l.Unlimited {
		for _, f := range extensions {
			if d.Has(f) {
				d.Fail(f, "cannot be set on an unlimited limit")
			}
		}
		return l
	}
	if d.Has(batchField) && !p.o.Cluster {
		d.Fail(batchField, "applies only to rls.mode cluster: in local mode the limits are decided in this process already")
	}
	p.count(d, l, rpu)
	if p.o.Cluster {
		// Batched mode; the batch object is read (and checked) even when there is nothing to
		// batch: requests_per_unit 0 refuses every hit.
		l.Alg = rules.Batch(d, l.Alg, l.Algorithm)
	}
	return l
}

// replaces reads the names of the limits that the limit named own replaces.
func replaces(lo *conf.Obj, own string) []string {
	var names []string
	for i, r := range lo.List("replaces") {
		name := r.String("name", "")
		r.Done()
		field := "replaces[" + strconv.Itoa(i) + "].name"
		switch {
		case name == "":
			lo.Fail(field, "cannot be empty")
		case name == own:
			lo.Fail(field, "cannot be the limit's own name "+strconv.Quote(name))
		}
		names = append(names, name)
	}
	return names
}

// rate reads the limit's unit and unit_multiplier into l (its window: 0 when they are
// invalid or the limit is unlimited), and returns its requests_per_unit.
func rate(lo *conf.Obj, l *Limit) (rpu int64) {
	unit := strings.ToLower(lo.String("unit", ""))
	rpu = lo.Int("requests_per_unit", 0, 0, 1<<32-1)
	l.Multiplier = lo.Int("unit_multiplier", 1, 1, MaxMultiplier)
	var secs int64
	for _, u := range Units {
		if u.Name == unit {
			l.Unit, secs = u.Unit, u.Seconds
		}
	}
	switch {
	case l.Unlimited && lo.Has("unit"):
		lo.Fail("unit", "cannot be set when unlimited is true")
	case l.Unlimited && lo.Has("unit_multiplier"):
		lo.Fail("unit_multiplier", "cannot be set when unlimited is true")
	case l.Unlimited:
	case !lo.Has("unit"):
		lo.Fail("unit", "is required (one of "+unitNames()+")")
	case secs == 0:
		lo.Fail("unit", "must be one of "+unitNames()+", got "+strconv.Quote(unit))
	case secs*l.Multiplier > MaxMultiplier:
		lo.Fail("unit_multiplier", "a window of "+strconv.FormatInt(l.Multiplier, 10)+" "+unit+"s is longer than 10 years")
		secs = 0
	}
	l.Window = secs * l.Multiplier
	return rpu
}

// count reads the limit's algorithm (Diana's extension of d) and builds what decides it: the
// algorithm, the fallback of on_error local, or envoyproxy/ratelimit's counter.
func (p *parser) count(d *conf.Obj, l *Limit, rpu int64) {
	kind, name, extra, ok := p.algorithm(d)
	l.Algorithm = name
	if !ok || rpu <= 0 || l.Window <= 0 {
		return
	}
	window := l.Window * algos.Second
	params, ok := algorithmParams(d, l.Algorithm, kind, extra, rpu, window)
	if ok {
		params = kind.Check(conf.At(d.Path(algorithmField), d.Errors()), params)
	}
	build := func(nodes int64) algos.Algorithm {
		a, err := kind.Build(params, nodes)
		if err != nil {
			d.Fail("rate_limit", "cannot be counted by "+l.Algorithm+": "+err.Error())
			return nil
		}
		return a
	}
	if ok && !d.FailedWithin("rate_limit") && !d.FailedWithin(algorithmField) {
		l.Alg = build(1)
	}
	counter := !d.Has(algorithmField) && !d.Has(batchField)
	if l.Alg != nil && (p.o.Nodes > 1 || counter) {
		// The limit (its share) that decides while Redis cannot (on_error local); a
		// counter's is the limit itself, which the counter has not.
		l.Fallback = build(p.o.Nodes)
	}
	if l.Alg != nil && counter {
		// envoyproxy/ratelimit's counting: every hit counts, the service compares.
		l.Alg, _ = algos.NewCounter(window)
		l.counter = true
	}
}

// algorithmParams are the parameters of the algorithm named alg for a limit of rpu requests a
// window (µs): extra with the amount and the window; not ok if rpu is more than it counts.
func algorithmParams(d *conf.Obj, alg string, kind rules.AlgorithmKind, extra rules.Params, rpu, window int64) (params rules.Params, ok bool) {
	params, ok = rules.Params{}, true
	for name, v := range extra {
		params[name] = v
	}
	for _, q := range kind.Params {
		switch q.Role {
		case rules.Amount:
			params[q.Name] = rpu
			if rpu > q.Max {
				d.Fail("rate_limit", "cannot be counted by "+alg+": requests_per_unit must be at most "+strconv.FormatInt(q.Max, 10)+" for it, got "+strconv.FormatInt(rpu, 10))
				ok = false
			}
		case rules.Window:
			params[q.Name] = window
		}
	}
	return params, ok
}

// algorithm reads Diana's algorithm field of d (absent: fixed_window): a name, or an object
// with the name and the algorithm's parameters other than its amount and its window, which
// come from requests_per_unit and unit. It refuses, naming the field, an algorithm the service
// cannot run: one that holds leases (the service is never told that a request ended, so a
// slot would be given back only when its lease expires) or learns from latencies (the service
// never sees them).
func (p *parser) algorithm(d *conf.Obj) (kind rules.AlgorithmKind, name string, extra rules.Params, ok bool) {
	name = "fixed_window"
	v, has := d.Raw(algorithmField)
	var ao *conf.Obj
	switch v := v.(type) {
	case nil:
		if has {
			d.Fail(algorithmField, "must be a name or an object")
			return kind, name, nil, false
		}
	case string:
		name = v
	case *conf.Object:
		ao = d.Obj(algorithmField)
		ao.Require("name")
		name = ao.String("name", "")
	default:
		d.Fail(algorithmField, "must be a name or an object {name: ..., <parameters>}")
		return kind, name, nil, false
	}
	field := algorithmField
	if ao != nil {
		field += ".name"
	}
	kind, known := rules.Algorithm(name)
	switch {
	case !known || !runs(kind):
		why := ""
		switch {
		case kind.Leases:
			why = ": it holds a slot until its request ends, and Envoy's rate limit service is never told when a request ends (limit concurrency in dianad's proxy or the Kong plugin)"
		case kind.Latency:
			why = ": it learns from the latency of the upstream calls, which Envoy's rate limit service never sees"
		}
		d.Fail(field, "must be one of "+strings.Join(rules.AlgorithmsWhere(byName), ", ")+", got "+strconv.Quote(name)+why+
			"; "+strings.Join(rules.AlgorithmsWhere(func(k rules.AlgorithmKind) bool { return runs(k) && !byName(k) }), ", ")+
			" only as an object with their required parameters")
		if ao != nil {
			ao.Done()
		}
		return kind, name, nil, false
	}
	if ao != nil {
		extra = kind.ReadParams(ao)
		for _, q := range kind.Params {
			if _, given := extra[q.Name]; given && (q.Role == rules.Amount || q.Role == rules.Window) {
				from := "rate_limit.requests_per_unit"
				if q.Role == rules.Window {
					from = "rate_limit.unit and unit_multiplier"
				}
				ao.Fail(q.Name, "comes from "+from)
				delete(extra, q.Name)
			}
		}
		ao.Done()
	}
	for _, q := range kind.Params {
		if _, given := extra[q.Name]; q.Required && !given && q.Role != rules.Amount && q.Role != rules.Window {
			d.Fail(algorithmField, name+" needs its "+q.Name+": write "+algorithmField+": {name: "+name+", "+q.Name+": ...}")
			return kind, name, nil, false
		}
	}
	return kind, name, extra, !d.FailedWithin(algorithmField)
}

// runs reports whether kind can count a rate_limit: it takes an amount and a window, which
// come from requests_per_unit and unit, and holds no leases and learns no latencies (the
// service is never told when a request ends).
func runs(kind rules.AlgorithmKind) bool {
	_, amount := kind.Param(rules.Amount)
	_, window := kind.Param(rules.Window)
	return amount && window && !kind.Leases && !kind.Latency
}

// byName reports whether kind runs named alone: its parameters besides amount and window are
// optional.
func byName(kind rules.AlgorithmKind) bool {
	if !runs(kind) {
		return false
	}
	for _, p := range kind.Params {
		if p.Required && p.Role != rules.Amount && p.Role != rules.Window {
			return false
		}
	}
	return true
}

func unitNames() string {
	names := make([]string, len(Units))
	for i, u := range Units {
		names[i] = u.Name
	}
	return strings.Join(names, ", ")
}

// metadata reads the descriptor's metadata: any object, kept as a protobuf Struct for the
// dynamic metadata of the answers (nil when absent or empty, as there).
func metadata(d *conf.Obj) *structpb.Struct {
	v, ok := d.Raw("metadata")
	if !ok {
		return nil
	}
	o, isObj := v.(*conf.Object)
	if !isObj {
		d.Fail("metadata", "must be an object")
		return nil
	}
	if len(o.Keys) == 0 {
		return nil
	}
	return structValue(o).GetStructValue()
}

// structValue converts a document's value into a protobuf Value.
func structValue(v conf.Value) *structpb.Value {
	switch v := v.(type) {
	case bool:
		return structpb.NewBoolValue(v)
	case conf.Number:
		f, _ := strconv.ParseFloat(string(v), 64) // the decoder checked its syntax
		return structpb.NewNumberValue(f)
	case string:
		return structpb.NewStringValue(v)
	case []conf.Value:
		l := &structpb.ListValue{Values: make([]*structpb.Value, len(v))}
		for i, e := range v {
			l.Values[i] = structValue(e)
		}
		return structpb.NewListValue(l)
	case *conf.Object:
		s := &structpb.Struct{Fields: make(map[string]*structpb.Value, len(v.Keys))}
		for i, k := range v.Keys {
			s.Fields[k] = structValue(v.Vals[i])
		}
		return structpb.NewStructValue(s)
	}
	return structpb.NewNullValue()
}

// multiplierField is unit_multiplier's number in RateLimitResponse.RateLimit, a
// google.protobuf.UInt32Value, as Envoy PR #47307 adds it. go-control-plane does not declare it
// yet, so it travels as a field the message does not know, which protobuf keeps and sends.
const multiplierField = 4

// setMultiplier adds unit_multiplier m to the limit's wire form.
func setMultiplier(l *pb.RateLimitResponse_RateLimit, m int64) {
	inner := protowire.AppendTag(nil, 1, protowire.VarintType) // UInt32Value.value
	inner = protowire.AppendVarint(inner, uint64(m))
	b := protowire.AppendTag(nil, multiplierField, protowire.BytesType)
	l.ProtoReflect().SetUnknown(protowire.AppendBytes(b, inner))
}

// textFields are the fields envoyproxy/ratelimit decodes into strings: its YAML decoder takes a
// number or a boolean written there as its text ("value: 200" is the value "200").
var textFields = map[string]bool{"domain": true, "key": true, "value": true, "name": true}

// valuesAsText turns every number or boolean written in a text field into its text.
func valuesAsText(v conf.Value) {
	switch v := v.(type) {
	case []conf.Value:
		for _, e := range v {
			valuesAsText(e)
		}
	case *conf.Object:
		for i, k := range v.Keys {
			switch x := v.Vals[i].(type) {
			case conf.Number:
				if textFields[k] {
					v.Vals[i] = string(x)
				}
			case bool:
				if textFields[k] {
					v.Vals[i] = strconv.FormatBool(x)
				}
			default:
				if k != "metadata" { // free-form: kept as written
					valuesAsText(x)
				}
			}
		}
	}
}
