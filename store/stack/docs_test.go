package stack

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// docs/kong.md's row of redis_timeout, written by hand, states the defaults of Redis as declared
// here. (The redis table of docs/configuration.md is generated from dianad's decoder, which
// takes them from here, by schema/internal/gen, whose test fails when the table is stale; the
// Kong plugin's field table takes them from here directly.)
func TestDocsDefaults(t *testing.T) {
	n := func(v int64) string { return strconv.FormatInt(v, 10) }
	kong, err := os.ReadFile(filepath.Join("..", "..", "docs", "kong.md"))
	if err != nil {
		t.Fatal(err)
	}
	row := "| `redis_timeout` | `" + n(DefaultTimeout.Milliseconds()) + "` | ms a decision waits for Redis; after " + n(DefaultFailures) + " failures in a row"
	if !strings.Contains(string(kong), row) {
		t.Errorf("docs/kong.md: no row starting %q", row)
	}
}
