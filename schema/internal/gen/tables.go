package main

import (
	"errors"
	"strconv"
	"strings"

	"github.com/diana-gw/diana/shared/conf"
	"github.com/diana-gw/diana/shared/rules"
)

// splice returns page with the part between the markers of section replaced by body.
func splice(page []byte, section, body string) ([]byte, error) {
	begin := "<!-- " + section + ": generated from shared/rules by make generate -->\n"
	end := "<!-- end of " + section + " -->\n"
	s := string(page)
	i, j := strings.Index(s, begin), strings.Index(s, end)
	if i < 0 || j < i {
		return nil, errors.New("no lines " + strings.TrimSpace(begin) + " and " + strings.TrimSpace(end))
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
