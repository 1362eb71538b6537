package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/diana-gw/diana/shared/conf"
	"github.com/diana-gw/diana/shared/rules"
)

// splice returns page with the part between the markers of section replaced by what body makes
// of it. The markers are the line "<!-- SECTION: ... -->", the rest of which says where the
// part comes from, and the line "<!-- end of SECTION -->".
func splice(page []byte, section string, body func(old string) (string, error)) ([]byte, error) {
	s := string(page)
	begin := strings.Index(s, "<!-- "+section+": ")
	end := strings.Index(s, "<!-- end of "+section+" -->\n")
	if begin < 0 || end < begin {
		return nil, errors.New("no lines <!-- " + section + ": ... --> and <!-- end of " + section + " -->")
	}
	i := begin + strings.Index(s[begin:], "-->\n") + len("-->\n")
	b, err := body(s[i:end])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", section, err)
	}
	return []byte(s[:i] + b + s[end:]), nil
}

// text is a body for splice that does not depend on what the part holds now.
func text(s string) func(string) (string, error) {
	return func(string) (string, error) { return s, nil }
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

// number writes n with thousands separators, or as a power of ten past a million, or of two
// from 2^16.
func number(n int64) string {
	for e := 16; e < 63; e++ {
		if n == 1<<e {
			return "2^" + strconv.Itoa(e)
		}
	}
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
