// Building the rules of a plugin config: one rules.Spec per limit, filled from the flat fields
// and built by shared/rules, its errors named by the flat fields they came from.

package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/diana-gw/diana/shared/conf"
	"github.com/diana-gw/diana/shared/rules"
)

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
