package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/diana-gw/diana/shared/conf"
)

// docs/envoy.md's two field tables (the filter's configuration, then its cluster object) name
// the fields readConfig reads, no others, each with the default readConfig gives it. A default
// the reader does not state (an empty string, an object, a default computed from another field)
// is the table's own prose.
func TestDocsFieldTables(t *testing.T) {
	page, err := os.ReadFile("../docs/envoy.md")
	if err != nil {
		t.Fatal(err)
	}
	tables := fieldTables(string(page))
	if len(tables) != 2 {
		t.Fatalf("docs/envoy.md: %d tables headed | field | default | meaning |, want 2", len(tables))
	}
	fields := conf.Describe(func(o *conf.Obj) { readConfig(o) })
	for i, prefix := range []string{"", "cluster."} {
		var read []string
		for _, f := range fields {
			name, ok := strings.CutPrefix(f.Path, prefix)
			if !ok || f.Type == "" || strings.ContainsAny(name, ".[*") {
				continue
			}
			read = append(read, name)
			cell, ok := tables[i][name]
			if !ok {
				t.Errorf("docs/envoy.md: the table of %q lacks %s, which the filter reads", prefix, f.Path)
				continue
			}
			if want := docDefault(f.Default); want != "" && cell != want {
				t.Errorf("docs/envoy.md: %s's default is %s, the reader's is %s", f.Path, cell, want)
			}
		}
		for name := range tables[i] {
			if !slices.Contains(read, name) {
				t.Errorf("docs/envoy.md: the table of %q names %s, which the filter does not read", prefix, name)
			}
		}
	}
}

// docDefault is how the tables write a default the reader states, "" for one they describe.
func docDefault(v any) string {
	if v == nil || v == "" {
		return ""
	}
	return fmt.Sprintf("`%v`", v)
}

// fieldTables returns each table of page headed "| field | default | meaning |": its fields'
// default cells by name.
func fieldTables(page string) []map[string]string {
	var tables []map[string]string
	var cur map[string]string
	for _, line := range strings.Split(page, "\n") {
		switch {
		case line == "| field | default | meaning |":
			cur = map[string]string{}
			tables = append(tables, cur)
		case cur != nil && strings.HasPrefix(line, "| `"):
			cells := strings.Split(line, " | ")
			cur[strings.Trim(cells[0], "| `")] = cells[1]
		case !strings.HasPrefix(line, "|"):
			cur = nil
		}
	}
	return tables
}
