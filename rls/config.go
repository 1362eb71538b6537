// Package rls is Envoy's rate limit service (envoy.service.ratelimit.v3.RateLimitService) in
// dianad, a drop-in for envoyproxy/ratelimit: its descriptor config format read as is, its
// lookup, its answers, with the decisions made by Diana's stores.
package rls

import (
	"errors"
	"strconv"
	"strings"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

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
	Name            string   // rate_limit.name, for replaces
	Replaces        []string // the names of the limits this one replaces
	Unlimited       bool
	Shadow          bool
	Detailed        bool // detailed_metric: the metric key holds the request's values
	// Alg counts the limit (a fixed window of one unit unless Diana's algorithm field picks
	// another), nil when unlimited or when requests_per_unit is 0 (every hit is over the
	// limit, as there); Fallback is its share per node for on_error local.
	Alg, Fallback algos.Algorithm
	Algorithm     string
	proto         *pb.RateLimitResponse_RateLimit
}

// node is one level of a domain's descriptor tree.
type node struct {
	children      map[string]*node // by "key_value", or "key" for a descriptor without a value
	wildcards     []string         // the children's names that end in '*', in config order
	limit         *Limit
	valueToMetric bool
	share         string // share_threshold: the wildcard value ("files/*") every match counts under
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
}

// Diana's extensions, next to rate_limit: algorithmField names the algorithm of shared/rules
// that counts the limit instead of a fixed window; batchField puts it in batched mode (cluster
// mode only), as a rule's batch field does.
const (
	algorithmField = "algorithm"
	batchField     = "batch"
)

// extensions are Diana's fields beside rate_limit, which apply only to a counted limit.
var extensions = []string{algorithmField, batchField}

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
		if prev, dup := c.files[domain]; dup && root != nil {
			errs.Add("domain", "duplicate domain "+strconv.Quote(domain)+", also in "+prev)
		}
		if err := errs.Err(); err != nil {
			all = append(all, err)
			continue
		}
		c.domains[domain], c.files[domain] = root, f.Name
	}
	if len(all) > 0 {
		return nil, errors.Join(all...)
	}
	return c, nil
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
			if !strings.HasSuffix(value, "*") {
				d.Fail("share_threshold", "applies only to a wildcard value (ending in '*'), got "+strconv.Quote(value))
			}
			child.share = value
		}
		shadow := d.Bool("shadow_mode", false)
		detailed := d.Bool("detailed_metric", false)
		if d.Bool("quota_mode", false) {
			d.Fail("quota_mode", "is not supported by dianad (it answers OK to a request over the limit, reporting it only in dynamic metadata)")
		}
		alg := d.String(algorithmField, "")
		if d.Has("rate_limit") {
			child.limit = p.limit(d, full, alg, shadow, detailed)
		} else {
			for _, f := range extensions {
				if d.Has(f) {
					d.Fail(f, "applies only beside rate_limit")
				}
			}
		}
		if strings.HasSuffix(name, "*") {
			n.wildcards = append(n.wildcards, name)
		}
		p.descriptors(d, child, full+".")
		d.Done()
		if key != "" {
			n.children[name] = child
		}
	}
}

// limit reads the rate_limit block of d.
func (p *parser) limit(d *conf.Obj, full, algName string, shadow, detailed bool) *Limit {
	lo := d.Obj("rate_limit")
	l := &Limit{FullKey: full, Shadow: shadow, Detailed: detailed}
	l.Unlimited = lo.Bool("unlimited", false)
	l.Name = lo.String("name", "")
	for i, r := range lo.List("replaces") {
		name := r.String("name", "")
		r.Done()
		field := "replaces[" + strconv.Itoa(i) + "].name"
		switch {
		case name == "":
			lo.Fail(field, "cannot be empty")
		case name == l.Name:
			lo.Fail(field, "cannot be the limit's own name "+strconv.Quote(name))
		}
		l.Replaces = append(l.Replaces, name)
	}
	unit := strings.ToLower(lo.String("unit", ""))
	rpu := lo.Int("requests_per_unit", 0, 0, 1<<32-1)
	var secs int64
	for _, u := range Units {
		if u.Name == unit {
			l.Unit, secs = u.Unit, u.Seconds
		}
	}
	switch {
	case l.Unlimited && lo.Has("unit"):
		lo.Fail("unit", "cannot be set when unlimited is true")
	case l.Unlimited:
	case !lo.Has("unit"):
		lo.Fail("unit", "is required (one of "+unitNames()+")")
	case secs == 0:
		lo.Fail("unit", "must be one of "+unitNames()+", got "+strconv.Quote(unit))
	}
	lo.Done()
	l.RequestsPerUnit = uint32(rpu)
	l.proto = &pb.RateLimitResponse_RateLimit{RequestsPerUnit: l.RequestsPerUnit, Unit: l.Unit, Name: l.Name}
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
	kind, alg, reason := algorithmFor(algName)
	if reason != "" {
		d.Fail(algorithmField, reason)
	} else if l.Algorithm = alg; rpu > 0 && secs > 0 {
		build := func(nodes int64) algos.Algorithm {
			a, err := kind.Build(params(kind, rpu, secs*algos.Second), nodes)
			if err != nil {
				d.Fail("rate_limit", "cannot be counted by "+alg+": "+err.Error())
				return nil
			}
			return a
		}
		l.Alg = build(1)
		if l.Alg != nil && p.o.Nodes > 1 {
			l.Fallback = build(p.o.Nodes)
		}
	}
	if p.o.Cluster {
		// Batched mode; the batch object is read (and checked) even when there is nothing to
		// batch: requests_per_unit 0 refuses every hit.
		l.Alg = rules.Batch(d, l.Alg, alg)
	}
	return l
}

// algorithmFor returns the kind of algorithm name ("": fixed_window), or why it cannot count
// a rate_limit: it must take its amount and its window from requests_per_unit and unit alone.
func algorithmFor(name string) (rules.AlgorithmKind, string, string) {
	if name == "" {
		name = "fixed_window"
	}
	kind, ok := rules.Algorithm(name)
	if !ok || !fits(kind) {
		return kind, name, "must be one of " + strings.Join(rules.AlgorithmsWhere(fits), ", ") + ", got " + strconv.Quote(name)
	}
	return kind, name, ""
}

// fits reports whether kind can count a rate_limit: its amount and window parameters come from
// requests_per_unit and unit, its other parameters are optional, and it holds no leases (the
// service is never told when a request ends).
func fits(kind rules.AlgorithmKind) bool {
	if kind.Leases {
		return false
	}
	_, amount := kind.Param(rules.Amount)
	_, window := kind.Param(rules.Window)
	if !amount || !window {
		return false
	}
	for _, p := range kind.Params {
		if p.Required && p.Role != rules.Amount && p.Role != rules.Window {
			return false
		}
	}
	return true
}

// params are kind's parameters for amount per window, the others at their defaults.
func params(kind rules.AlgorithmKind, amount, window int64) rules.Params {
	given := rules.Params{}
	for _, p := range kind.Params {
		switch p.Role {
		case rules.Amount:
			given[p.Name] = amount
		case rules.Window:
			given[p.Name] = window
		}
	}
	return kind.Resolve(given)
}

func unitNames() string {
	names := make([]string, len(Units))
	for i, u := range Units {
		names[i] = u.Name
	}
	return strings.Join(names, ", ")
}

// valuesAsText turns every number or boolean written as a descriptor's value into its text, as
// envoyproxy/ratelimit's YAML decoder does ("value: 200" is the value "200").
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
				if k == "value" {
					v.Vals[i] = string(x)
				}
			case bool:
				if k == "value" {
					v.Vals[i] = strconv.FormatBool(x)
				}
			default:
				valuesAsText(x)
			}
		}
	}
}
