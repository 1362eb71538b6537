package rls

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/diana-gw/diana/shared/rules"
)

// The config errors envoyproxy/ratelimit refuses (its test/config cases), and the ones Diana adds;
// each names the file and the field.
func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files []string // contents of a.yaml, b.yaml, ...
		want  string
	}{
		{"empty domain", []string{"descriptors:\n"}, "a.yaml: domain: is required"},
		{"empty domain value", []string{"domain: ''\n"}, "a.yaml: domain: cannot be empty"},
		{"duplicate domain", []string{"domain: test-domain\n", "domain: test-domain\n"},
			`b.yaml: domain: duplicate domain "test-domain", also in a.yaml`},
		{"empty key", []string{"domain: d\ndescriptors:\n  - value: value1\n"}, "a.yaml: descriptors[0].key: is required"},
		{"duplicate key", []string{"domain: d\ndescriptors:\n  - key: key1\n    value: value1\n  - key: key1\n    value: value1\n"},
			`a.yaml: descriptors[1].key: duplicate descriptor "d.key1_value1"`},
		{"duplicate nested key", []string{"domain: d\ndescriptors:\n  - key: k\n    descriptors:\n      - key: s\n      - key: s\n"},
			`a.yaml: descriptors[0].descriptors[1].key: duplicate descriptor "d.k.s"`},
		{"bad unit", []string{"domain: d\ndescriptors:\n  - key: key1\n    rate_limit: {unit: foo, requests_per_unit: 5}\n"},
			`a.yaml: descriptors[0].rate_limit.unit: must be one of second, minute, hour, day, week, month, year, got "foo"`},
		{"no unit", []string{"domain: d\ndescriptors:\n  - key: key1\n    rate_limit: {requests_per_unit: 5}\n"},
			`a.yaml: descriptors[0].rate_limit.unit: is required`},
		{"replaces self", []string{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {name: self, replaces: [{name: self}], unit: second, requests_per_unit: 5}\n"},
			`a.yaml: descriptors[0].rate_limit.replaces[0].name: cannot be the limit's own name "self"`},
		{"replaces empty", []string{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {name: self, replaces: [{name: }], unit: second, requests_per_unit: 5}\n"},
			`a.yaml: descriptors[0].rate_limit.replaces[0].name: cannot be empty`},
		{"bad yaml", []string{"domain: d\ndescriptors: [\n"}, "a.yaml: line"},
		{"misspelled key", []string{"domain: d\ndescriptors:\n  - key: k\n    ratelimit: {unit: day, requests_per_unit: 5}\n"},
			"a.yaml: descriptors[0].ratelimit: unknown field"},
		{"misspelled key 2", []string{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requestsperunit: 5}\n"},
			"a.yaml: descriptors[0].rate_limit.requestsperunit: unknown field"},
		{"non map list", []string{"domain: d\ndescriptors: [a, b]\n"}, `a.yaml: descriptors[0]: must be an object, got the string "a"`},
		{"non string key", []string{"0.25: test-domain\n"}, "a.yaml: 0.25: unknown field"},
		{"unlimited with unit", []string{"domain: d\ndescriptors:\n  - key: foo\n    rate_limit: {unlimited: true, unit: day, requests_per_unit: 25}\n"},
			"a.yaml: descriptors[0].rate_limit.unit: cannot be set when unlimited is true"},
		{"requests per unit too big", []string{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 4294967296}\n"},
			"a.yaml: descriptors[0].rate_limit.requests_per_unit: must be between 0 and 4294967295"},
		{"share threshold without wildcard", []string{"domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n"},
			`a.yaml: descriptors[0].share_threshold: applies only to a wildcard value (holding '*'), got "v"`},
		{"metadata not an object", []string{"domain: d\ndescriptors:\n  - key: k\n    metadata: [a]\n"}, "a.yaml: descriptors[0].metadata: must be an object"},
		{"unknown algorithm", []string{"domain: d\ndescriptors:\n  - key: k\n    algorithm: gcra\n    rate_limit: {unit: second, requests_per_unit: 5}\n"},
			`a.yaml: descriptors[0].algorithm: must be one of fixed_window, leaky_bucket, sliding_log, sliding_window, token_bucket, got "gcra"`},
		{"algorithm with leases", []string{"domain: d\ndescriptors:\n  - key: k\n    algorithm: concurrency\n    rate_limit: {unit: second, requests_per_unit: 5}\n"},
			`a.yaml: descriptors[0].algorithm: must be one of`},
		{"algorithm without limit", []string{"domain: d\ndescriptors:\n  - key: k\n    algorithm: sliding_window\n"},
			`a.yaml: descriptors[0].algorithm: applies only beside rate_limit`},
		{"batch without limit", []string{"domain: d\ndescriptors:\n  - key: k\n    batch: {max: 10}\n"},
			`a.yaml: descriptors[0].batch: applies only beside rate_limit`},
		{"batch of an unlimited limit", []string{"domain: d\ndescriptors:\n  - key: k\n    batch: {max: 10}\n    rate_limit: {unlimited: true}\n"},
			`a.yaml: descriptors[0].batch: cannot be set on an unlimited limit`},
		{"local: batch", []string{"domain: d\ndescriptors:\n  - key: k\n    batch: {max: 10}\n    rate_limit: {unit: second, requests_per_unit: 5}\n"},
			`a.yaml: descriptors[0].batch: applies only to rls.mode cluster`},
		{"batch without max", []string{"domain: d\ndescriptors:\n  - key: k\n    batch: {min: 2}\n    rate_limit: {unit: second, requests_per_unit: 5}\n"},
			`a.yaml: descriptors[0].batch.max: is required`},
		{"batch min over max", []string{"domain: d\ndescriptors:\n  - key: k\n    batch: {min: 20, max: 10}\n    rate_limit: {unit: second, requests_per_unit: 5}\n"},
			`a.yaml: descriptors[0].batch.min: must be at most max (10), got 20`},
		{"batch misspelt", []string{"domain: d\ndescriptors:\n  - key: k\n    batch: {max: 10, maxage: 1s}\n    rate_limit: {unit: second, requests_per_unit: 5}\n"},
			`a.yaml: descriptors[0].batch.maxage: unknown field`},
		{"algorithm bound", []string{"domain: d\ndescriptors:\n  - key: k\n    algorithm: sliding_log\n    rate_limit: {unit: second, requests_per_unit: 20000}\n"},
			`a.yaml: descriptors[0].rate_limit: cannot be counted by sliding_log`},
		// unit_multiplier (Envoy PR #47307): at least 1, a window of at most 10 years.
		{"unit multiplier 0", []string{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, unit_multiplier: 0, requests_per_unit: 5}\n"},
			"a.yaml: descriptors[0].rate_limit.unit_multiplier: must be between 1 and"},
		{"unit multiplier too long", []string{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, unit_multiplier: 11, requests_per_unit: 5}\n"},
			"a.yaml: descriptors[0].rate_limit.unit_multiplier: a window of 11 years is longer than 10 years"},
		{"unit multiplier of unlimited", []string{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit_multiplier: 2}\n"},
			"a.yaml: descriptors[0].rate_limit.unit_multiplier: cannot be set when unlimited is true"},
		// Diana's algorithm field: what the service cannot run is refused with the reason.
		{"adaptive", []string{"domain: d\ndescriptors:\n  - key: k\n    algorithm: adaptive\n    rate_limit: {unit: second, requests_per_unit: 5}\n"},
			`a.yaml: descriptors[0].algorithm: must be one of fixed_window, leaky_bucket, sliding_log, sliding_window, token_bucket, got "adaptive"`},
		{"concurrency object", []string{"domain: d\ndescriptors:\n  - key: k\n    algorithm: {name: concurrency}\n    rate_limit: {unit: second, requests_per_unit: 5}\n"},
			`a.yaml: descriptors[0].algorithm.name: must be one of fixed_window, leaky_bucket, sliding_log, sliding_window, token_bucket, got "concurrency": it holds a slot until its request ends`},
		{"warm up by name", []string{"domain: d\ndescriptors:\n  - key: k\n    algorithm: warm_up\n    rate_limit: {unit: second, requests_per_unit: 5}\n"},
			"a.yaml: descriptors[0].algorithm: warm_up needs its warmup: write algorithm: {name: warm_up, warmup: ...}"},
		{"amount in the algorithm", []string{"domain: d\ndescriptors:\n  - key: k\n    algorithm: {name: token_bucket, rate: 9}\n    rate_limit: {unit: second, requests_per_unit: 5}\n"},
			"a.yaml: descriptors[0].algorithm.rate: comes from rate_limit.requests_per_unit"},
		{"window in the algorithm", []string{"domain: d\ndescriptors:\n  - key: k\n    algorithm: {name: sliding_window, window: 1s}\n    rate_limit: {unit: second, requests_per_unit: 5}\n"},
			"a.yaml: descriptors[0].algorithm.window: comes from rate_limit.unit and unit_multiplier"},
		{"unknown parameter", []string{"domain: d\ndescriptors:\n  - key: k\n    algorithm: {name: token_bucket, brust: 9}\n    rate_limit: {unit: second, requests_per_unit: 5}\n"},
			"a.yaml: descriptors[0].algorithm.brust: unknown field"},
		{"parameter bound", []string{"domain: d\ndescriptors:\n  - key: k\n    algorithm: {name: sliding_window, subwindows: 0}\n    rate_limit: {unit: second, requests_per_unit: 5}\n"},
			"a.yaml: descriptors[0].algorithm.subwindows: must be between 1 and"},
		{"parameters excluding each other", []string{"domain: d\ndescriptors:\n  - key: k\n    algorithm: {name: leaky_bucket, burst: 5, delay: 2, nodelay: true}\n    rate_limit: {unit: second, requests_per_unit: 5}\n"},
			"a.yaml: descriptors[0].algorithm.nodelay: cannot be combined with delay"},
		{"algorithm without name", []string{"domain: d\ndescriptors:\n  - key: k\n    algorithm: {burst: 5}\n    rate_limit: {unit: second, requests_per_unit: 5}\n"},
			"a.yaml: descriptors[0].algorithm.name: is required"},
		{"algorithm a number", []string{"domain: d\ndescriptors:\n  - key: k\n    algorithm: 5\n    rate_limit: {unit: second, requests_per_unit: 5}\n"},
			"a.yaml: descriptors[0].algorithm: must be a name or an object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var files []File
			for i, data := range tc.files {
				files = append(files, File{Name: string(rune('a'+i)) + ".yaml", Data: []byte(data)})
			}
			_, err := Parse(files, ParseOptions{Cluster: !strings.HasPrefix(tc.name, "local:")})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse: %v\nwant an error with %q", err, tc.want)
			}
		})
	}
}

// The README's examples, read as is, and the limit each descriptor finds (golden vectors from
// its text): the stats key of the limit, "" for none.
func TestLookupExamples(t *testing.T) {
	c := readExamples(t)
	type entry = [2]string
	for _, tc := range []struct {
		domain  string
		entries []entry
		metric  string // "" : no limit
		rpu     uint32
	}{
		{"mongo_cps", []entry{{"database", "users"}}, "mongo_cps.database_users", 500},
		{"mongo_cps", []entry{{"database", "default"}}, "mongo_cps.database_default", 500},
		{"mongo_cps", []entry{{"database", "other"}}, "", 0},
		{"mongo_cps", []entry{{"database", "users"}, {"x", "y"}}, "", 0}, // deeper than the config
		{"nope", []entry{{"database", "users"}}, "", 0},
		// Example 2: nested descriptors; the key alone matches any value.
		{"messaging", []entry{{"message_type", "marketing"}, {"to_number", "2061111111"}}, "messaging.message_type_marketing.to_number", 5},
		{"messaging", []entry{{"to_number", "2061111111"}}, "messaging.to_number", 100},
		{"messaging", []entry{{"message_type", "marketing"}}, "", 0},
		// Example 3: key_value before key.
		{"edge_proxy_per_ip", []entry{{"remote_address", "50.0.0.1"}}, "edge_proxy_per_ip.remote_address", 10},
		{"edge_proxy_per_ip", []entry{{"remote_address", "50.0.0.5"}}, "edge_proxy_per_ip.remote_address_50.0.0.5", 0},
		// Example 4: the level must match.
		{"example4", []entry{{"key", "value"}, {"subkey", "subvalue"}}, "example4.key_value.subkey", 300},
		{"example4", []entry{{"key", "value"}}, "", 0},
		// Example 6: shadow mode.
		{"example6", []entry{{"service", "auth-service"}, {"user", "user-a"}}, "example6.service.user_user-a", 10},
		// Example 8: detailed metric.
		{"example8", []entry{{"key1", "unspecified"}}, "example8.key1_unspecified", 10},
		{"example8", []entry{{"key1", "value1"}}, "example8.key1_value1", 20},
		// Example 9: wildcard.
		{"example9", []entry{{"key1", "value_1"}}, "example9.key1_value*", 20},
		{"example9", []entry{{"key1", "other"}}, "", 0},
		// Example 10: value_to_metric.
		{"example10", []entry{{"route", "api"}, {"http_method", "GET"}, {"subject_id", "123"}}, "example10.route_api.http_method_GET.subject_id", 60},
		{"example10_wildcard", []entry{{"user", "alice"}, {"action", "readfile"}, {"resource", "documents"}}, "example10_wildcard.user_alice.action_readfile.resource", 100},
		// Example 11: share_threshold.
		{"example11", []entry{{"files", "files/a.pdf"}}, "example11.files_files/*", 10},
	} {
		var es []*rlv3.RateLimitDescriptor_Entry
		for _, e := range tc.entries {
			es = append(es, &rlv3.RateLimitDescriptor_Entry{Key: e[0], Value: e[1]})
		}
		m, _ := c.lookup(tc.domain, es)
		got, rpu := "", uint32(0)
		if m.limit != nil {
			got, rpu = m.metric, m.limit.RequestsPerUnit
		}
		if got != tc.metric || rpu != tc.rpu {
			t.Errorf("%s %v: limit %q (%d per unit), want %q (%d)", tc.domain, tc.entries, got, rpu, tc.metric, tc.rpu)
		}
	}
}

// Numbers and booleans written as values are their text; every unit maps to its seconds.
func TestParseValuesAndUnits(t *testing.T) {
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n  - key: status\n    value: 200\n    rate_limit: {unit: MINUTE, requests_per_unit: 1}\n")
	b.WriteString("  - key: 404\n    rate_limit: {unit: second, requests_per_unit: 1, name: 7, replaces: [{name: true}]}\n")
	for _, u := range Units {
		b.WriteString("  - key: " + u.Name + "\n    rate_limit: {unit: " + u.Name + ", requests_per_unit: 7}\n")
	}
	c, err := Parse([]File{{Name: "a.yaml", Data: []byte(b.String())}}, ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m, _ := c.lookup("d", []*rlv3.RateLimitDescriptor_Entry{{Key: "status", Value: "200"}})
	if m.limit == nil || m.limit.Unit != pb.RateLimitResponse_RateLimit_MINUTE {
		t.Fatalf("value: 200 with unit MINUTE: %+v", m.limit)
	}
	m, _ = c.lookup("d", []*rlv3.RateLimitDescriptor_Entry{{Key: "404", Value: "x"}})
	if m.limit == nil || m.limit.Name != "7" || len(m.limit.Replaces) != 1 || m.limit.Replaces[0] != "true" {
		t.Fatalf("key: 404, name: 7, replaces: [{name: true}]: %+v", m.limit)
	}
	want := map[string]int64{"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 604800, "month": 2592000, "year": 31536000}
	for name, secs := range want {
		m, _ := c.lookup("d", []*rlv3.RateLimitDescriptor_Entry{{Key: name, Value: "x"}})
		if m.limit == nil || unitSeconds(m.limit.Unit) != secs {
			t.Errorf("unit %s: %+v, want %d s", name, m.limit, secs)
		}
	}
}

// readExamples reads testdata/examples, the README's example configs, one domain per file.
func readExamples(t *testing.T) *Config {
	t.Helper()
	files, _, err := ReadDir(filepath.Join("testdata", "examples"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse(files, ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A directory's files are read in order, dot files and subdirectories skipped; the signature
// follows every change.
func TestReadDir(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("b.yaml", "domain: b\n")
	write("a.yaml", "domain: a\n")
	write(".hidden.yaml", "not: read\n")
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	files, sig, err := ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 || filepath.Base(files[0].Name) != "a.yaml" || filepath.Base(files[1].Name) != "b.yaml" {
		t.Fatalf("files %v", files)
	}
	write("a.yaml", "domain: aa\n")
	if sig2, _, _ := Signature(dir); sig2 == sig {
		t.Fatal("the signature did not change with a file's size")
	}
	if _, _, err := ReadDir(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "config_dir") {
		t.Fatalf("missing dir: %v", err)
	}
}

// Every descriptor config in the docs (a yaml block that starts with "domain:") is valid.
func TestDocsExamples(t *testing.T) {
	docs, err := filepath.Glob(filepath.Join("..", "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, name := range docs {
		md, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for i, block := range strings.Split(string(md), "```yaml\n")[1:] {
			block, _, _ = strings.Cut(block, "```")
			if !strings.HasPrefix(block, "domain:") {
				continue
			}
			n++
			if _, err := Parse([]File{{Name: name + " block " + strconv.Itoa(i+1), Data: []byte(block)}}, ParseOptions{}); err != nil {
				t.Error(err)
			}
		}
	}
	if n == 0 {
		t.Fatal("no descriptor config in the docs")
	}
}

// Diana's batch extension puts a limit in batched mode, with its algorithm, in cluster mode; a
// limit of 0 requests reads it and has nothing to batch.
func TestParseBatch(t *testing.T) {
	doc := "domain: d\ndescriptors:\n  - key: k\n    batch: {max: 100, min: 5}\n    algorithm: sliding_window\n    rate_limit: {unit: second, requests_per_unit: 1000}\n" +
		"  - key: z\n    batch: {max: 100}\n    rate_limit: {unit: second, requests_per_unit: 0}\n"
	c, err := Parse([]File{{Name: "a.yaml", Data: []byte(doc)}}, ParseOptions{Cluster: true})
	if err != nil {
		t.Fatal(err)
	}
	m, _ := c.lookup("d", []*rlv3.RateLimitDescriptor_Entry{{Key: "k", Value: "v"}})
	b, ok := m.limit.Alg.(*rules.Batched)
	if !ok || b.Min != 5 || b.Max != 100 || b.Algorithm.Script().Name != "sliding_window" {
		t.Fatalf("limit k: %T %+v, want a batched sliding window of 5 to 100", m.limit.Alg, m.limit.Alg)
	}
	if m, _ := c.lookup("d", []*rlv3.RateLimitDescriptor_Entry{{Key: "z", Value: "v"}}); m.limit == nil || m.limit.Alg != nil {
		t.Fatalf("limit z: %+v, want a limit refusing every hit", m.limit)
	}
}
