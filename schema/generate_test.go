package schema

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/diana-gw/diana/shared/conf"
	"github.com/diana-gw/diana/shared/rules"
)

// The algorithms, their parameters and bounds are stated once, in shared/rules' registry. From
// it come limit.schema.json and the algorithm tables of docs/configuration.md and README.md;
// this test fails when a committed file differs from what the registry gives, and with -update
// (make generate) it writes them.
var update = flag.Bool("update", false, "write the files generated from the algorithms' registry")

func TestGenerated(t *testing.T) {
	files := []struct {
		path  string
		build func() ([]byte, error)
	}{
		{LimitFile, limitSchema},
		{RuleFile, func() ([]byte, error) { return grammarSchema(grammars[0]) }},
		{DianadFile, func() ([]byte, error) { return grammarSchema(grammars[1]) }},
		{RulesFile, func() ([]byte, error) { return grammarSchema(grammars[2]) }},
		{filepath.Join("..", "docs", "configuration.md"), func() ([]byte, error) {
			return splice(filepath.Join("..", "docs", "configuration.md"), "algorithms", docsTable())
		}},
		{filepath.Join("..", "README.md"), func() ([]byte, error) {
			return splice(filepath.Join("..", "README.md"), "algorithms", readmeTable())
		}},
	}
	for _, f := range files {
		want, err := f.build()
		if err != nil {
			t.Fatalf("%s: %v", f.path, err)
		}
		if *update {
			if err := os.WriteFile(f.path, want, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(f.path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is not what the algorithms' registry gives: run make generate", f.path)
		}
	}
}

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
		{"$id", BaseURL + LimitFile},
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
		s = append(s, kv{"$ref", RuleFile + "#/$defs/" + ref})
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

// splice returns the file at path with the part between the markers of section replaced.
func splice(path, section, body string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	begin := "<!-- " + section + ": generated from shared/rules by make generate -->\n"
	end := "<!-- end of " + section + " -->\n"
	s := string(b)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		return nil, os.ErrNotExist
	}
	return []byte(s[:i+len(begin)] + body + s[j:]), nil
}

// docsTable is the algorithm table of docs/configuration.md.
func docsTable() string {
	var b strings.Builder
	b.WriteString("| algorithm | parameters (bold: required) | `RateLimit-Limit` | `RateLimit-Reset` |\n| --- | --- | --- | --- |\n")
	for _, name := range rules.Algorithms() {
		k, _ := rules.Algorithm(name)
		b.WriteString("| `" + name + "` | " + paramList(k) + " | " + k.LimitDoc + " | " + k.ResetDoc + " |\n")
	}
	return b.String()
}

// readmeTable is the algorithm table of README.md.
func readmeTable() string {
	var b strings.Builder
	b.WriteString("| `limit.algorithm` | parameters (bold: required) | what it is |\n| --- | --- | --- |\n")
	for _, name := range rules.Algorithms() {
		k, _ := rules.Algorithm(name)
		b.WriteString("| `" + name + "` | " + paramList(k) + " | " + k.Doc + " |\n")
	}
	return b.String()
}

// paramList writes an algorithm's parameters with their defaults and bounds.
func paramList(k rules.AlgorithmKind) string {
	var ps []string
	for _, p := range k.Params {
		s := "`" + p.Name + "`"
		if p.Required {
			s = "**" + s + "**"
		}
		var notes []string
		switch {
		case p.Same != "":
			notes = append(notes, "= `"+p.Same+"`")
		case !p.Required && p.Type == rules.Duration:
			notes = append(notes, "`"+conf.FormatDuration(p.Default)+"`")
		case !p.Required && p.Type == rules.Flag:
			notes = append(notes, "`"+strconv.FormatBool(p.Default == 1)+"`")
		case !p.Required && p.AtMost != "":
			notes = append(notes, "`"+strconv.FormatInt(p.Default, 10)+"`, at most `"+p.AtMost+"`")
		case !p.Required:
			notes = append(notes, "`"+strconv.FormatInt(p.Default, 10)+"`")
		}
		switch p.Type {
		case rules.Count:
			notes = append(notes, number(p.Min)+"–"+number(p.Max))
		case rules.Duration:
			notes = append(notes, conf.FormatDuration(p.Min)+"–"+conf.FormatDuration(p.Max))
		}
		if p.Excludes != "" {
			notes = append(notes, "not with `"+p.Excludes+"`")
		}
		ps = append(ps, s+" ("+strings.Join(notes, "; ")+")")
	}
	return strings.Join(ps, ", ")
}

// number writes n with thousands separators, or as a power of ten past a million.
func number(n int64) string {
	for e, p := 7, int64(10_000_000); e <= 18 && p > 0; e, p = e+1, p*10 {
		if n == p {
			return "10^" + strconv.Itoa(e)
		}
		if n == p-1 {
			return "10^" + strconv.Itoa(e) + " − 1"
		}
	}
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
