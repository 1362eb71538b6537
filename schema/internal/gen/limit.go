package main

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/diana-gw/diana/schema"
	"github.com/diana-gw/diana/shared/conf"
	"github.com/diana-gw/diana/shared/rules"
)

// obj is a JSON object that keeps its keys in order.
type obj []kv

type kv struct {
	k string
	v any
}

func (o obj) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, f := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(f.k)
		v, err := json.Marshal(f.v)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// limitSchema is limit.schema.json: the limit object of a rule, one if/then per algorithm.
func limitSchema() ([]byte, error) {
	names := rules.Algorithms()
	props := obj{{"algorithm", obj{
		{"description", "The algorithm, which decides the other parameters: " + strings.Join(names, ", ") + "."},
		{"type", "string"},
		{"enum", names},
		{"examples", []string{"token_bucket"}},
	}}}
	// The union of every algorithm's parameters, for a reader that looks a name up; each
	// algorithm's own bounds are in its if/then below.
	for _, p := range allParams() {
		props = append(props, kv{p.Name, paramSchema(p.Param, p.users, p.Min, p.Max)})
	}
	var cases []any
	for _, name := range names {
		k, _ := rules.Algorithm(name)
		required := []string{}
		allowed := []string{"algorithm"}
		own := obj{}
		for _, p := range k.Params {
			if p.Required {
				required = append(required, p.Name)
			}
			allowed = append(allowed, p.Name)
			own = append(own, kv{p.Name, paramSchema(p, []string{name}, p.Min, p.Max)})
		}
		then := obj{{"required", required}, {"propertyNames", obj{{"enum", allowed}}}, {"properties", own}}
		for _, p := range k.Params {
			if p.Excludes != "" && p.Type == rules.Flag {
				then = append(then,
					kv{"if", obj{{"properties", obj{{p.Name, obj{{"const", true}}}}}, {"required", []string{p.Name}}}},
					kv{"then", obj{{"not", obj{{"required", []string{p.Excludes}}}}}})
			} else if p.Excludes != "" {
				then = append(then, kv{"not", obj{{"required", []string{p.Name, p.Excludes}}}})
			}
		}
		cases = append(cases, obj{
			{"if", obj{{"properties", obj{{"algorithm", obj{{"const", name}}}}}, {"required", []string{"algorithm"}}}},
			{"then", then},
		})
	}
	doc := obj{
		{"$schema", "https://json-schema.org/draft/2020-12/schema"},
		{"$id", schema.BaseURL + schema.LimitFile},
		{"title", "Diana limit"},
		{"description", "The limit of a rule: an algorithm and its parameters, which depend on the algorithm; a parameter of another algorithm is an error. Generated from the algorithms' registry in shared/rules (make generate): do not edit."},
		{"type", "object"},
		{"additionalProperties", false},
		{"required", []string{"algorithm"}},
		{"properties", props},
		{"allOf", cases},
		{"$defs", obj{
			{"batching", obj{
				{"description", "The algorithms whose rules can take batch (batched cluster mode)."},
				{"enum", rules.AlgorithmsWhere(rules.AlgorithmKind.Batches)},
			}},
			{"waiting", obj{
				{"description", "The algorithms that can hold a request (action delay)."},
				{"enum", rules.AlgorithmsWhere(func(k rules.AlgorithmKind) bool { return k.Waits })},
			}},
			{"local_only", obj{
				{"description", "The algorithms that learn from what one node sees (mode local only)."},
				{"enum", rules.AlgorithmsWhere(func(k rules.AlgorithmKind) bool { return k.LocalOnly })},
			}},
		}},
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return nil, err
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

// paramSchema is the JSON Schema of parameter p as the algorithms users take it; where several
// do, each one's meaning and bounds are in its if/then.
func paramSchema(p rules.Param, users []string, min, max int64) obj {
	doc := p.Doc
	if len(users) > 1 {
		doc = "see each algorithm's own description"
	}
	s := obj{{"description", strings.Join(users, ", ") + ": " + doc + "."}}
	switch p.Type {
	case rules.Count:
		s = append(s, kv{"type", "integer"}, kv{"minimum", min}, kv{"maximum", max})
		if !p.Required && p.Same == "" && p.AtMost == "" && len(users) == 1 {
			s = append(s, kv{"default", p.Default})
		}
	case rules.Duration:
		ref := "positive_duration"
		if p.Min == 0 { // 0 turns the parameter off (adaptive's slo)
			ref = "duration"
		}
		s = append(s, kv{"$ref", schema.RuleFile + "#/$defs/" + ref})
		if !p.Required {
			s = append(s, kv{"default", conf.FormatDuration(p.Default)})
		}
	case rules.Flag:
		s = append(s, kv{"type", "boolean"})
		if len(users) == 1 {
			s = append(s, kv{"default", p.Default == 1})
		}
	}
	if p.Example != 0 {
		switch p.Type {
		case rules.Flag:
			s = append(s, kv{"examples", []bool{p.Example == 1}})
		case rules.Duration:
			s = append(s, kv{"examples", []string{conf.FormatDuration(p.Example)}})
		default:
			s = append(s, kv{"examples", []int64{p.Example}})
		}
	}
	return s
}

// param is a parameter name across the algorithms that take it: its widest bounds.
type param struct {
	rules.Param
	users []string
}

// allParams returns every parameter name, in the order the algorithms list them first.
func allParams() []*param {
	var out []*param
	seen := map[string]*param{}
	for _, name := range rules.Algorithms() {
		k, _ := rules.Algorithm(name)
		for _, p := range k.Params {
			q := seen[p.Name]
			if q == nil {
				q = &param{Param: p}
				q.Doc = ""
				seen[p.Name] = q
				out = append(out, q)
			}
			q.Min, q.Max = min(q.Min, p.Min), max(q.Max, p.Max)
			q.users = append(q.users, name)
			if !strings.Contains(q.Doc, p.Doc) {
				q.Doc += map[bool]string{true: "; ", false: ""}[q.Doc != ""] + p.Doc
			}
		}
	}
	return out
}
