package stack

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/diana-gw/diana/shared/conf"
)

// The redis table of docs/configuration.md, and docs/kong.md's row of redis_timeout, state the defaults and bounds of Redis as declared
// here. (dianad's schema is tied to its decoder, which takes them from here, by the schema
// tests; the Kong plugin's field table takes them from here directly.)
func TestDocsDefaults(t *testing.T) {
	md, err := os.ReadFile(filepath.Join("..", "..", "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	d := func(v time.Duration) string { return conf.FormatDuration(v.Microseconds()) }
	n := func(v int64) string { return strconv.FormatInt(v, 10) }
	want := map[string][2]string{ // field: its type and bounds, its default
		"timeout":          {"duration, " + d(MinTimeout) + "–" + d(MaxTimeout), `"` + d(DefaultTimeout) + `"`},
		"prefix":           {"string", `"` + DefaultPrefix + `"`},
		"breaker_failures": {"integer, 1–" + n(MaxFailures), n(DefaultFailures)},
		"breaker_open_for": {"duration, " + d(MinOpenFor) + "–" + d(MaxOpenFor), `"` + d(DefaultOpenFor) + `"`},
		"wait_replicas":    {"integer, 0–" + n(MaxWait), "0"},
		"db":               {"integer, 0–" + n(MaxDB), "0"},
	}
	section := string(md)
	if i := strings.Index(section, "\n### redis\n"); i >= 0 {
		section = section[i:]
	} else {
		t.Fatal("docs/configuration.md has no redis section")
	}
	section, _, _ = strings.Cut(section[1:], "\n### ")
	for field, w := range want {
		prefix := "| `" + field + "` | "
		found := false
		for _, line := range strings.Split(section, "\n") {
			if !strings.HasPrefix(line, prefix) {
				continue
			}
			found = true
			cells := strings.Split(line, " | ")
			if got := [2]string{cells[1], strings.Trim(cells[2], "`")}; got != w {
				t.Errorf("docs/configuration.md, redis.%s: type %q, default %q; want %q, %q", field, got[0], got[1], w[0], w[1])
			}
		}
		if !found {
			t.Errorf("docs/configuration.md: no row for redis.%s", field)
		}
	}
	kong, err := os.ReadFile(filepath.Join("..", "..", "docs", "kong.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := "| `redis_timeout` | `" + n(DefaultTimeout.Milliseconds()) + "` | ms a decision waits for Redis; after " + n(DefaultFailures) + " failures in a row"
	if !strings.Contains(string(kong), row) {
		t.Errorf("docs/kong.md: no row starting %q", row)
	}
}
