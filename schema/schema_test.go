package schema

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/diana-gw/diana/config"
	"github.com/diana-gw/diana/examples"
	"github.com/diana-gw/diana/httplimit"
	"github.com/diana-gw/diana/server"
	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/conf"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/shared/usage"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// validators are the compiled document schemas: dianad's and the remote document's.
type validators struct {
	dianad, rules *jsonschema.Schema
}

func compile(t *testing.T) validators {
	t.Helper()
	c := jsonschema.NewCompiler()
	for _, name := range []string{RuleFile, LimitFile, DianadFile, RulesFile} {
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(read(t, name)))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := c.AddResource(BaseURL+name, doc); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	var v validators
	var err error
	if v.dianad, err = c.Compile(BaseURL + DianadFile); err != nil {
		t.Fatalf("compile %s: %v", DianadFile, err)
	}
	if v.rules, err = c.Compile(BaseURL + RulesFile); err != nil {
		t.Fatalf("compile %s: %v", RulesFile, err)
	}
	if _, err = c.Compile(BaseURL + RuleFile); err != nil {
		t.Fatalf("compile %s: %v", RuleFile, err)
	}
	return v
}

func read(t *testing.T, name string) []byte {
	t.Helper()
	b, err := fs.ReadFile(FS(), name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// doc is a test document: its JSON and whether it is a remote document (version and rules).
type doc struct {
	json   string
	remote bool
}

func (v validators) schemaFor(remote bool) *jsonschema.Schema {
	if remote {
		return v.rules
	}
	return v.dianad
}

// parse parses a JSON document into the tree both checks read.
func parse(t *testing.T, s string) conf.Value {
	t.Helper()
	val, err := conf.ParseJSON([]byte(s))
	if err != nil {
		t.Fatalf("test document is not JSON: %v\n%s", err, s)
	}
	return val
}

// instance converts a conf tree into the values the validator takes.
func instance(v conf.Value) any {
	switch v := v.(type) {
	case *conf.Object:
		m := make(map[string]any, len(v.Keys))
		for i, k := range v.Keys {
			m[k] = instance(v.Vals[i])
		}
		return m
	case []conf.Value:
		l := make([]any, len(v))
		for i, e := range v {
			l[i] = instance(e)
		}
		return l
	case conf.Number:
		return json.Number(v)
	}
	return v
}

// check validates a tree with the schema and decodes it with the Go decoder.
func (v validators) check(val conf.Value, remote bool) (schemaErr error, cfg *server.Config, goErr error) {
	schemaErr = v.schemaFor(remote).Validate(instance(val))
	cfg, goErr = server.Decode(val, "doc", remote)
	return schemaErr, cfg, goErr
}

// fullLimits returns limits with every parameter of each algorithm.
func fullLimits() map[string]string {
	return map[string]string{
		"token_bucket":         `{"algorithm": "token_bucket", "rate": 100, "period": "1m", "burst": 20}`,
		"warm_up":              `{"algorithm": "warm_up", "rate": 10, "period": "1s", "warmup": "30s"}`,
		"leaky_bucket":         `{"algorithm": "leaky_bucket", "rate": 10, "period": "1s", "burst": 20, "delay": 5}`,
		"leaky_bucket_nodelay": `{"algorithm": "leaky_bucket", "rate": 10, "period": "1s", "burst": 20, "nodelay": true}`,
		"fixed_window":         `{"algorithm": "fixed_window", "limit": 100, "window": "1m"}`,
		"sliding_window":       `{"algorithm": "sliding_window", "limit": 100, "window": "1m30s"}`,
		"sliding_log":          `{"algorithm": "sliding_log", "limit": 10000, "window": "1h"}`,
		"concurrency":          `{"algorithm": "concurrency", "max": 10, "lease": "30s"}`,
	}
}

// minimalLimits returns limits with only the required parameters.
func minimalLimits() map[string]string {
	return map[string]string{
		"token_bucket":   `{"algorithm": "token_bucket", "rate": 10}`,
		"warm_up":        `{"algorithm": "warm_up", "rate": 10, "warmup": "10s"}`,
		"leaky_bucket":   `{"algorithm": "leaky_bucket", "rate": 10}`,
		"fixed_window":   `{"algorithm": "fixed_window", "limit": 10, "window": "1s"}`,
		"sliding_window": `{"algorithm": "sliding_window", "limit": 10, "window": "1s"}`,
		"sliding_log":    `{"algorithm": "sliding_log", "limit": 10, "window": "1s"}`,
		"concurrency":    `{"algorithm": "concurrency", "max": 10}`,
		"adaptive":       `{"algorithm": "adaptive"}`,
	}
}

// fullRule is a rule with every field set; it is in cluster mode, so it needs redis.
func fullRule(name, limit string) string {
	action := `"action": "delay", "max_delay": "1m30s",` // only algorithms that can hold requests
	for _, a := range []string{"leaky_bucket", "sliding_window", "concurrency"} {
		if strings.Contains(limit, `"`+a+`"`) {
			action = `"action": "shadow", "max_delay": "1m30s",`
		}
	}
	return `{
		"name": "` + name + `",
		"match": {
			"methods": ["GET", "POST"],
			"paths": ["/api/**", "/users/*/orders", "/login"],
			"hosts": ["api.example.com", "*.example.com"],
			"headers": {"X-Api-Key": "*", "X-Api-Version": "2"},
			"clients": ["10.0.0.0/8", "192.0.2.7", "2001:db8::/32", "::ffff:10.0.0.0/104"],
			"consumers": ["alice", "bob"],
			"not": [` + exception + `, {"paths": "/health"}]
		},
		"by": ["global", "ip", "consumer", "route", "path", "method", "host", "header:X-Api-Key", "device", "device:X-Phone-Id"],
		"cost": 2,
		"limit": ` + limit + `,
		"mode": "cluster",
		` + action + `
		"ban": "10m",
		"on_error": "local",
		"nodes": 3,
		"reply": {"status": 503, "message": "slow down", "headers": false, "legacy_headers": true}
	}`
}

// exception is a match exception with every part set.
const exception = `{"methods": ["GET"], "paths": ["/api/health"], "hosts": ["internal.example.com"], "headers": {"X-Internal": "1"},
	"clients": ["10.1.0.0/16"], "consumers": ["monitor"]}`

const fullServer = `
	"listen": ":8081",
	"connections": {"max": 1000, "keepalive_timeout": "30s", "header_timeout": "10s", "body_timeout": "20s", "send_timeout": "2m"},
	"admin": {"listen": "127.0.0.1:9191", "token": "t0ken", "connections": {"max": 100, "keepalive_timeout": "0s", "header_timeout": "5s", "body_timeout": "5s", "send_timeout": "5s"}},
	"local_store": {"max_keys": 100000},
	"trusted_proxies": ["10.0.0.0/8", "192.0.2.7", "2001:db8::/32"],
	"ipv6_prefix": 56,
	"escaped_slashes": "keep",
	"strip_trailing_dots_spaces": true,
	"client_ip_header": "X-Real-IP",
	"consumer_header": "X-Consumer",
	"access_log": true,
	"upstreams": [
		{"name": "api", "url": "http://127.0.0.1:9000", "match": {"methods": "GET", "paths": "/api/**", "hosts": "*.example.com", "headers": {"X-Api": "*"},
			"clients": "10.0.0.0/8", "consumers": "alice", "not": [` + exception + `]}},
		{"name": "admin", "url": "http://127.0.0.1:9001", "match": {"paths": "/admin/**", "not": ` + exception + `}},
		{"name": "demo", "url": "demo:"}
	],
	"redis": {
		"addrs": ["127.0.0.1:6379", "127.0.0.1:6380"], "master_name": "mymaster", "username": "diana",
		"password": "s3cret", "db": 2, "tls": true, "tls_ca_file": "testdata/ca.pem", "tls_server_name": "redis.internal",
		"tls_cert_file": "testdata/client.pem", "tls_key_file": "testdata/client.key",
		"wait_replicas": 1, "timeout": "100ms", "prefix": "d:",
		"breaker_failures": 5, "breaker_open_for": "2s"
	},
	"remote": {"redis_key": "diana:rules", "redis_channel": "diana:changed", "interval": "10s"},
	"rls": {"listen": "127.0.0.1:8081", "config_dir": "/etc/dianad/ratelimit", "mode": "cluster", "on_error": "local", "nodes": 3, "response_headers": true,
		"response_dynamic_metadata": true, "quota_mode": false, "shadow_mode": false, "merge_domain_config": true,
		"quota": {"max_buckets_per_stream": 500, "max_buckets": 20000, "max_streams": 100, "assignment_ttl": "30s"}},`

// validDocs are documents both the schema and the decoder must accept: every algorithm, with
// every field of the rule and of the server set, and the short forms (a string for a list).
func validDocs() map[string]doc {
	docs := map[string]doc{}
	// adaptive is local only: every parameter, and the slo form.
	adaptive := `"rules": [{"name": "a", "mode": "local", "limit": {"algorithm": "adaptive", "percentile": 90, "tolerance": 100, "min_limit": 2,
		"max_limit": 500, "interval": "200ms", "smoothing": 30, "probe_every": "1m", "probe_samples": 100, "backoff": 75}},
		{"name": "b", "limit": {"algorithm": "adaptive", "slo": "250ms"}}]}`
	docs["dianad adaptive"] = doc{json: `{"version": 1,` + adaptive}
	docs["remote adaptive"] = doc{json: `{"version": 1,` + adaptive, remote: true}
	for alg, limit := range fullLimits() {
		docs["dianad "+alg] = doc{json: `{"version": 1,` + fullServer + `"rules": [` + fullRule("r-"+alg, limit) + `]}`}
		docs["remote "+alg] = doc{json: `{"version": 1, "rules": [` + fullRule("r-"+alg, limit) + `]}`, remote: true}
	}
	docs["remote url"] = doc{json: `{"version": 1, "remote": {"url": "https://cfg.example.com/diana.yaml", "headers": {"Authorization": "Bearer x"}, "interval": "1m"}}`}
	docs["redis tls without verification"] = doc{json: `{"version": 1, "redis": {"addrs": "127.0.0.1:6379", "tls": true, "tls_skip_verify": true}}`}
	docs["secrets from files"] = doc{json: `{"version": 1, "admin": {"token_file": "testdata/secret"}, "redis": {"addrs": "127.0.0.1:6379", "password_file": "testdata/secret"}}`}
	docs["redis cluster endpoint"] = doc{json: `{"version": 1, "redis": {"addrs": "127.0.0.1:6379", "cluster": true}}`}
	docs["short forms"] = doc{json: `{"version": 1, "trusted_proxies": "10.0.0.1", "redis": {"addrs": "127.0.0.1:6379"},
		"rules": [{"name": "a", "by": "ip", "match": {"methods": "GET", "paths": "/", "hosts": "example.com"}, "limit": {"algorithm": "token_bucket", "rate": 1}}]}`}
	for alg, limit := range map[string]string{
		"fixed_window":       `{"algorithm": "fixed_window", "limit": 100, "window": "1s"}`,
		"sliding_window":     `{"algorithm": "sliding_window", "limit": 100, "window": "1m"}`,
		"sliding_window_sub": `{"algorithm": "sliding_window", "limit": 100, "window": "1m", "subwindows": 60}`,
		"sliding_log":        `{"algorithm": "sliding_log", "limit": 100, "window": "1s"}`,
		"token_bucket":       `{"algorithm": "token_bucket", "rate": 100, "burst": 200}`,
		"leaky_bucket":       `{"algorithm": "leaky_bucket", "rate": 100, "burst": 50, "nodelay": true}`,
	} {
		rule := `{"name": "b", "mode": "cluster", "action": "shadow", "limit": ` + limit + `, "batch": {"max": 50, "min": 5, "max_age": "200ms"}}`
		docs["batch "+alg] = doc{json: `{"version": 1, "redis": {"addrs": "127.0.0.1:6379"}, "rules": [` + rule + `]}`}
		docs["remote batch "+alg] = doc{json: `{"version": 1, "rules": [` + rule + `]}`, remote: true}
	}
	docs["exceptions and unlimited rules"] = doc{json: `{"version": 1, "rules": [
		{"name": "internal", "unlimited": true, "match": {"clients": ["10.0.0.0/8", "::1"], "not": ` + exception + `}},
		{"name": "monitor", "unlimited": true, "match": {"consumers": "monitor"}},
		{"name": "quiet", "unlimited": false, "match": {"consumers": "x", "not": {"clients": "10.0.0.1"}}, "limit": {"algorithm": "token_bucket", "rate": 1}}]}`}
	docs["remote exceptions and unlimited rules"] = doc{json: docs["exceptions and unlimited rules"].json, remote: true}
	usage := `"rules": [
		{"name": "t", "by": ["header:X-Api-Key"], "usage": {"body": "usage.input_tokens+usage.output_tokens", "estimate": 0, "estimate_body": "max_tokens", "fallback": 4096},
			"limit": {"algorithm": "token_bucket", "rate": 100000, "period": "1m"}},
		{"name": "h", "usage": {"header": "x-usage-total-tokens"}, "action": "shadow", "limit": {"algorithm": "fixed_window", "limit": 1000, "window": "1h"}},
		{"name": "s", "usage": {"body": "usage.total_tokens", "stream_usage": "last"}, "limit": {"algorithm": "sliding_window", "limit": 1000, "window": "1h", "subwindows": 1}},
		{"name": "w", "usage": {"format": "auto", "unreadable": "refuse", "bytes_per_token": 3,
			"weights": {"input": 1, "cached_input": 0.1, "cache_write": 1.25, "cache_write_1h": 2, "output": 4, "reasoning": 4.000001}},
			"limit": {"algorithm": "token_bucket", "rate": 100000, "period": "1m"}},
		{"name": "p", "usage": {"format": "anthropic", "prices": {"claude-sonnet-4-5*": {"input": 3, "cache_write": 3.75, "cache_write_1h": 6, "cached_input": 0.3, "output": 15, "reasoning": 15},
			"default": {"input": 15, "output": 75}}}, "limit": {"algorithm": "fixed_window", "limit": 50000000, "window": "24h"}}]}`
	docs["usage"] = doc{json: `{"version": 1,` + usage}
	docs["remote usage"] = doc{json: `{"version": 1,` + usage, remote: true}
	docs["minimal"] = doc{json: `{"version": 1}`}
	docs["minimal remote"] = doc{json: `{"version": 1}`, remote: true}
	docs["empty lists"] = doc{json: `{"version": 1, "trusted_proxies": [], "upstreams": [], "rules": [{"name": "a", "by": [], "limit": {"algorithm": "fixed_window", "limit": 1, "window": "1s"}}]}`}
	docs["no listen"] = doc{json: `{"version": 1, "listen": ""}`}
	docs["open admin"] = doc{json: `{"version": 1, "admin": {"listen": ":9090", "allow_unauthenticated": true}}`}
	docs["every duration unit"] = doc{json: `{"version": 1, "rules": [
		{"name": "d", "limit": {"algorithm": "token_bucket", "rate": 1, "period": "1d2h3m4s5ms6us7µs"}},
		{"name": "e", "limit": {"algorithm": "concurrency", "max": 1, "lease": "000010s"}}]}`}
	docs["path patterns"] = doc{json: `{"version": 1, "rules": [{"name": "p", "match": {"paths": ["/", "/**", "/*", "/a/*/b/**", "//x", "/a/"], "hosts": ["*.Example.com", "EXAMPLE.com", "[2001:DB8::1]", "a_b-c.d", "localhost"], "methods": ["PURGE", "*"]}, "limit": {"algorithm": "token_bucket", "rate": 1}}]}`}
	docs["extreme numbers"] = doc{json: `{"version": 1, "rules": [
		{"name": "a", "cost": 0, "limit": {"algorithm": "token_bucket", "rate": 1000000000000000, "period": "1us", "burst": 1}},
		{"name": "b", "cost": 1000000000000000, "limit": {"algorithm": "leaky_bucket", "rate": 1000000000000000, "period": "1s", "burst": 999999999999999, "delay": 1000000000000000}},
		{"name": "c", "limit": {"algorithm": "fixed_window", "limit": 1000000000000000, "window": "1us"}},
		{"name": "d", "limit": {"algorithm": "concurrency", "max": 10000, "lease": "10y"}},
		{"name": "e", "limit": {"algorithm": "leaky_bucket", "rate": 1, "burst": 0, "nodelay": false, "delay": 0}},
		{"name": "f", "reply": {"status": 400}, "limit": {"algorithm": "warm_up", "rate": 1000000000000000, "period": "10y", "warmup": "1us"}},
		{"name": "g", "reply": {"status": 599}, "nodes": 10000, "limit": {"algorithm": "sliding_window", "limit": 1000000000000000, "window": "1us"}},
		{"name": "h", "ban": "10y", "limit": {"algorithm": "sliding_window", "limit": 1000000000000000, "window": "10y"}},
		{"name": "h2", "limit": {"algorithm": "sliding_window", "limit": 1000000000000000, "window": "10y", "subwindows": 60}},
		{"name": "i", "limit": {"algorithm": "fixed_window", "limit": 1000000000000, "window": "1y"}},
		{"name": "j", "limit": {"algorithm": "token_bucket", "rate": 1000000000000, "period": "1y"}}]}`}
	return docs
}

func TestSchemasCompile(t *testing.T) {
	compile(t)
}

func TestValidDocuments(t *testing.T) {
	v := compile(t)
	for name, d := range validDocs() {
		t.Run(name, func(t *testing.T) {
			schemaErr, _, goErr := v.check(parse(t, d.json), d.remote)
			if schemaErr != nil {
				t.Errorf("schema rejects it: %v", schemaErr)
			}
			if goErr != nil {
				t.Errorf("decoder rejects it: %v", goErr)
			}
		})
	}
}

// The example config, as written in YAML, is valid for both.
func TestExampleConfig(t *testing.T) {
	v := compile(t)
	val, err := config.Decode([]byte(examples.DianaYAML), "diana.yaml")
	if err != nil {
		t.Fatal(err)
	}
	schemaErr, cfg, goErr := v.check(val, false)
	if schemaErr != nil {
		t.Errorf("schema rejects examples/diana.yaml: %v", schemaErr)
	}
	if goErr != nil {
		t.Errorf("decoder rejects examples/diana.yaml: %v", goErr)
	}
	if goErr == nil && len(cfg.Rules) == 0 {
		t.Error("examples/diana.yaml has no rules")
	}
}

// rule wraps one rule into a dianad document.
func rule(r string) string { return `{"version": 1, "rules": [` + r + `]}` }

// tb is a valid token bucket rule with extra fields.
func tb(extra string) string {
	if extra != "" {
		extra = ", " + extra
	}
	return rule(`{"name": "a", "limit": {"algorithm": "token_bucket", "rate": 10}` + extra + `}`)
}

// lim is a rule with the given limit.
func lim(limit string) string { return rule(`{"name": "a", "limit": ` + limit + `}`) }

func TestInvalidDocuments(t *testing.T) {
	v := compile(t)
	tests := []struct {
		name   string
		doc    string
		remote bool
		path   string // where the decoder reports the error
	}{
		// Secrets.
		{"password and password_file", `{"version": 1, "redis": {"addrs": "127.0.0.1:6379", "password": "x", "password_file": "testdata/secret"}}`, false, "redis.password_file"},
		{"tls_cert_file without tls_key_file", `{"version": 1, "redis": {"addrs": "127.0.0.1:6379", "tls": true, "tls_cert_file": "testdata/client.pem"}}`, false, "redis.tls_key_file"},
		{"tls_key_file without tls_cert_file", `{"version": 1, "redis": {"addrs": "127.0.0.1:6379", "tls": true, "tls_key_file": "testdata/client.key"}}`, false, "redis.tls_key_file"},
		{"token and token_file", `{"version": 1, "admin": {"token": "x", "token_file": "testdata/secret"}}`, false, "admin.token_file"},
		// A cost from the response.
		{"usage without header or body", lim(`{"algorithm": "token_bucket", "rate": 5}, "usage": {"estimate": 5}`), false, "rules[0].usage"},
		{"usage with header and body", lim(`{"algorithm": "token_bucket", "rate": 5}, "usage": {"header": "x-t", "body": "u.t"}`), false, "rules[0].usage.body"},
		{"usage with cost", lim(`{"algorithm": "token_bucket", "rate": 5}, "cost": 2, "usage": {"body": "u.t"}`), false, "rules[0].cost"},
		{"usage of sliding_log", lim(`{"algorithm": "sliding_log", "limit": 5, "window": "1s"}, "usage": {"body": "u.t"}`), false, "rules[0].limit.algorithm"},
		{"usage with subwindows", lim(`{"algorithm": "sliding_window", "limit": 5, "window": "1s", "subwindows": 4}, "usage": {"body": "u.t"}`), false, "rules[0].limit.subwindows"},
		{"usage with delay", lim(`{"algorithm": "token_bucket", "rate": 5}, "usage": {"body": "u.t"}, "action": "delay", "max_delay": "1s"`), false, "rules[0].action"},
		{"usage stream_usage unknown", lim(`{"algorithm": "token_bucket", "rate": 5}, "usage": {"body": "u.t", "stream_usage": "first"}`), false, "rules[0].usage.stream_usage"},
		{"usage negative fallback", lim(`{"algorithm": "token_bucket", "rate": 5}, "usage": {"body": "u.t", "fallback": -1}`), false, "rules[0].usage.fallback"},
		{"usage unknown format", lim(`{"algorithm": "token_bucket", "rate": 5}, "usage": {"format": "cohere"}`), false, "rules[0].usage.format"},
		{"usage format and body", lim(`{"algorithm": "token_bucket", "rate": 5}, "usage": {"format": "openai", "body": "u.t"}`), false, "rules[0].usage.body"},
		{"usage negative weight", lim(`{"algorithm": "token_bucket", "rate": 5}, "usage": {"format": "openai", "weights": {"output": -1}}`), false, "rules[0].usage.weights.output"},
		{"usage weight too large", lim(`{"algorithm": "token_bucket", "rate": 5}, "usage": {"format": "openai", "weights": {"output": 1000001}}`), false, "rules[0].usage.weights.output"},
		{"usage unknown class", lim(`{"algorithm": "token_bucket", "rate": 5}, "usage": {"format": "openai", "weights": {"audio": 2}}`), false, "rules[0].usage.weights.audio"},
		{"usage price without output", lim(`{"algorithm": "token_bucket", "rate": 5}, "usage": {"format": "openai", "prices": {"default": {"input": 1}}}`), false, "rules[0].usage.prices.default.output"},
		{"usage price as a string", lim(`{"algorithm": "token_bucket", "rate": 5}, "usage": {"format": "openai", "prices": {"default": {"input": "1", "output": 2}}}`), false, "rules[0].usage.prices.default.input"},
		{"usage unknown unreadable", lim(`{"algorithm": "token_bucket", "rate": 5}, "usage": {"format": "openai", "unreadable": "ignore"}`), false, "rules[0].usage.unreadable"},
		{"usage negative bytes_per_token", lim(`{"algorithm": "token_bucket", "rate": 5}, "usage": {"format": "openai", "bytes_per_token": -1}`), false, "rules[0].usage.bytes_per_token"},
		// Batched mode.
		{"batch in local mode", `{"version": 1, "rules": [{"name": "a", "limit": {"algorithm": "fixed_window", "limit": 5, "window": "1s"}, "batch": {"max": 5}}]}`, true, "rules[0].batch"},
		{"batch without max", `{"version": 1, "rules": [{"name": "a", "mode": "cluster", "limit": {"algorithm": "fixed_window", "limit": 5, "window": "1s"}, "batch": {"min": 5}}]}`, true, "rules[0].batch.max"},
		{"batch max 0", `{"version": 1, "rules": [{"name": "a", "mode": "cluster", "limit": {"algorithm": "fixed_window", "limit": 5, "window": "1s"}, "batch": {"max": 0}}]}`, true, "rules[0].batch.max"},
		{"unknown batch field", `{"version": 1, "rules": [{"name": "a", "mode": "cluster", "limit": {"algorithm": "fixed_window", "limit": 5, "window": "1s"}, "batch": {"max": 5, "size": 2}}]}`, true, "rules[0].batch.size"},
		{"adaptive in cluster mode", `{"version": 1, "rules": [{"name": "a", "mode": "cluster", "limit": {"algorithm": "adaptive"}}]}`, true, "rules[0].mode"},
		{"batch of concurrency", `{"version": 1, "rules": [{"name": "a", "mode": "cluster", "limit": {"algorithm": "concurrency", "max": 5}, "batch": {"max": 5}}]}`, true, "rules[0].batch"},
		{"batch of warm_up", `{"version": 1, "rules": [{"name": "a", "mode": "cluster", "limit": {"algorithm": "warm_up", "rate": 5, "warmup": "1s"}, "batch": {"max": 5}}]}`, true, "rules[0].batch"},
		{"batch with delay", `{"version": 1, "rules": [{"name": "a", "mode": "cluster", "action": "delay", "max_delay": "1s", "limit": {"algorithm": "token_bucket", "rate": 5}, "batch": {"max": 5}}]}`, true, "rules[0].batch"},
		{"batch max_age negative", `{"version": 1, "rules": [{"name": "a", "mode": "cluster", "limit": {"algorithm": "fixed_window", "limit": 5, "window": "1s"}, "batch": {"max": 5, "max_age": "-1s"}}]}`, true, "rules[0].batch.max_age"},

		// Unknown fields, at each level.
		{"unknown root field", `{"version": 1, "bogus": 1}`, false, "bogus"},
		{"unknown admin field", `{"version": 1, "admin": {"port": 9090}}`, false, "admin.port"},
		{"unknown connections field", `{"version": 1, "connections": {"idle_timeout": "1s"}}`, false, "connections.idle_timeout"},
		{"unknown local_store field", `{"version": 1, "local_store": {"max_bytes": 1}}`, false, "local_store.max_bytes"},
		{"unknown upstream field", `{"version": 1, "upstreams": [{"name": "a", "url": "demo:", "weight": 1}]}`, false, "upstreams[0].weight"},
		{"unknown upstream match field", `{"version": 1, "upstreams": [{"name": "a", "url": "demo:", "match": {"query": "x"}}]}`, false, "upstreams[0].match.query"},
		{"unknown redis field", `{"version": 1, "redis": {"addrs": "127.0.0.1:6379", "sentinels": true}}`, false, "redis.sentinels"},
		{"redis wait_replicas on a cluster", `{"version": 1, "redis": {"addrs": "127.0.0.1:6379", "cluster": true, "wait_replicas": 1}}`, false, "redis.wait_replicas"},
		{"redis wait_replicas too many", `{"version": 1, "redis": {"addrs": "127.0.0.1:6379", "wait_replicas": 17}}`, false, "redis.wait_replicas"},
		{"redis cluster with master_name", `{"version": 1, "redis": {"addrs": "127.0.0.1:6379", "cluster": true, "master_name": "m"}}`, false, "redis.cluster"},
		{"unknown remote field", `{"version": 1, "remote": {"token": "x"}}`, false, "remote.token"},
		{"unknown rule field", tb(`"limits": {}`), false, "rules[0].limits"},
		{"unknown match field", tb(`"match": {"method": "GET"}`), false, "rules[0].match.method"},
		{"unknown reply field", tb(`"reply": {"code": 429}`), false, "rules[0].reply.code"},
		{"unknown limit field", lim(`{"algorithm": "token_bucket", "rate": 10, "capacity": 5}`), false, "rules[0].limit.capacity"},
		{"server field in remote document", `{"version": 1, "listen": ":80"}`, true, "listen"},
		{"redis in remote document", `{"version": 1, "redis": {"addrs": "x:1"}}`, true, "redis"},
		{"unknown rule field in remote document", `{"version": 1, "rules": [{"name": "a", "limit": {"algorithm": "concurrency", "max": 1}, "x": 1}]}`, true, "rules[0].x"},

		// Wrong types.
		{"document not an object", `[]`, false, ""},
		{"version a string", `{"version": "1"}`, false, "version"},
		{"listen a number", `{"version": 1, "listen": 8080}`, false, "listen"},
		{"admin a string", `{"version": 1, "admin": "127.0.0.1:9090"}`, false, "admin"},
		{"rules an object", `{"version": 1, "rules": {}}`, false, "rules"},
		{"rule a string", `{"version": 1, "rules": ["a"]}`, false, "rules[0]"},
		{"cost a string", tb(`"cost": "1"`), false, "rules[0].cost"},
		{"cost a fraction", tb(`"cost": 1.5`), false, "rules[0].cost"},
		{"by a number", tb(`"by": 5`), false, "rules[0].by"},
		{"by item a number", tb(`"by": ["ip", 1]`), false, "rules[0].by[1]"},
		{"methods an object", tb(`"match": {"methods": {}}`), false, "rules[0].match.methods"},
		{"header value a number", tb(`"match": {"headers": {"X-A": 1}}`), false, "rules[0].match.headers.X-A"},
		{"reply.headers an unknown style", tb(`"reply": {"headers": "yes"}`), false, "rules[0].reply.headers"},
		{"reply.headers a number", tb(`"reply": {"headers": 1}`), false, "rules[0].reply.headers"},
		{"reply.legacy_headers with structured", tb(`"reply": {"headers": "structured", "legacy_headers": true}`), false, "rules[0].reply.legacy_headers"},
		{"limit a string", lim(`"100/s"`), false, "rules[0].limit"},
		{"rate a fraction", lim(`{"algorithm": "token_bucket", "rate": 1.5}`), false, "rules[0].limit.rate"},
		{"nodelay a string", lim(`{"algorithm": "leaky_bucket", "rate": 1, "nodelay": "true"}`), false, "rules[0].limit.nodelay"},
		{"ipv6_prefix a string", `{"version": 1, "ipv6_prefix": "64"}`, false, "ipv6_prefix"},
		{"tls a string", `{"version": 1, "redis": {"addrs": "x:1", "tls": "true"}}`, false, "redis.tls"},
		{"trusted proxy a number", `{"version": 1, "trusted_proxies": [1]}`, false, "trusted_proxies[0]"},
		{"remote header a number", `{"version": 1, "remote": {"headers": {"A": 1}}}`, false, "remote.headers.A"},
		{"upstreams an object", `{"version": 1, "upstreams": {"name": "a"}}`, false, "upstreams"},

		// Enum violations.
		{"unknown mode", tb(`"mode": "global"`), false, "rules[0].mode"},
		{"unknown action", tb(`"action": "block"`), false, "rules[0].action"},
		{"unknown on_error", tb(`"on_error": "fail"`), false, "rules[0].on_error"},
		{"unknown algorithm", lim(`{"algorithm": "gcra", "rate": 10}`), false, "rules[0].limit.algorithm"},
		{"algorithm in upper case", lim(`{"algorithm": "TOKEN_BUCKET", "rate": 10}`), false, "rules[0].limit.algorithm"},
		{"version 2", `{"version": 2}`, false, "version"},
		{"version 0", `{"version": 0}`, false, "version"},

		// Numbers out of range.
		{"cost negative", tb(`"cost": -1`), false, "rules[0].cost"},
		{"cost above 2^53", tb(`"cost": 9007199254740993`), false, "rules[0].cost"},
		{"nodes 0", tb(`"nodes": 0`), false, "rules[0].nodes"},
		{"nodes 10001", tb(`"nodes": 10001`), false, "rules[0].nodes"},
		{"status 200", tb(`"reply": {"status": 200}`), false, "rules[0].reply.status"},
		{"status 600", tb(`"reply": {"status": 600}`), false, "rules[0].reply.status"},
		{"rate 0", lim(`{"algorithm": "token_bucket", "rate": 0}`), false, "rules[0].limit.rate"},
		{"token_bucket rate above 2^51", lim(`{"algorithm": "token_bucket", "rate": 2251799813685249}`), false, "rules[0].limit.rate"},
		{"leaky_bucket rate above 2^51", lim(`{"algorithm": "leaky_bucket", "rate": 2251799813685249}`), false, "rules[0].limit.rate"},
		{"warm_up rate above 2^53", lim(`{"algorithm": "warm_up", "rate": 9007199254740993, "warmup": "1s"}`), false, "rules[0].limit.rate"},
		{"token_bucket burst 0", lim(`{"algorithm": "token_bucket", "rate": 1, "burst": 0}`), false, "rules[0].limit.burst"},
		{"token_bucket burst above 2^51", lim(`{"algorithm": "token_bucket", "rate": 1, "period": "1us", "burst": 2251799813685249}`), false, "rules[0].limit.burst"},
		{"leaky_bucket burst negative", lim(`{"algorithm": "leaky_bucket", "rate": 1, "burst": -1}`), false, "rules[0].limit.burst"},
		{"leaky_bucket burst 2^51", lim(`{"algorithm": "leaky_bucket", "rate": 1, "period": "1us", "burst": 2251799813685248}`), false, "rules[0].limit.burst"},
		{"leaky_bucket delay negative", lim(`{"algorithm": "leaky_bucket", "rate": 1, "delay": -1}`), false, "rules[0].limit.delay"},
		{"fixed_window limit 0", lim(`{"algorithm": "fixed_window", "limit": 0, "window": "1s"}`), false, "rules[0].limit.limit"},
		{"fixed_window limit above 2^51", lim(`{"algorithm": "fixed_window", "limit": 2251799813685249, "window": "1us"}`), false, "rules[0].limit.limit"},
		{"sliding_log limit 10001", lim(`{"algorithm": "sliding_log", "limit": 10001, "window": "1s"}`), false, "rules[0].limit.limit"},
		{"concurrency max 0", lim(`{"algorithm": "concurrency", "max": 0}`), false, "rules[0].limit.max"},
		{"concurrency max 10001", lim(`{"algorithm": "concurrency", "max": 10001}`), false, "rules[0].limit.max"},
		{"ipv6_prefix 0", `{"version": 1, "ipv6_prefix": 0}`, false, "ipv6_prefix"},
		{"connections max negative", `{"version": 1, "admin": {"connections": {"max": -1}}}`, false, "admin.connections.max"},
		{"header_timeout 0", `{"version": 1, "connections": {"header_timeout": "0s"}}`, false, "connections.header_timeout"},
		{"max_keys 63", `{"version": 1, "local_store": {"max_keys": 63}}`, false, "local_store.max_keys"},
		{"ipv6_prefix 129", `{"version": 1, "ipv6_prefix": 129}`, false, "ipv6_prefix"},
		{"escaped_slashes unknown", `{"version": 1, "escaped_slashes": "drop"}`, false, "escaped_slashes"},
		{"client_ip_header unknown", `{"version": 1, "client_ip_header": "X-Client-IP"}`, false, "client_ip_header"},
		{"strip_trailing_dots_spaces not a boolean", `{"version": 1, "strip_trailing_dots_spaces": "yes"}`, false, "strip_trailing_dots_spaces"},
		{"db negative", `{"version": 1, "redis": {"addrs": "x:1", "db": -1}}`, false, "redis.db"},
		{"db above 2^20", `{"version": 1, "redis": {"addrs": "x:1", "db": 1048577}}`, false, "redis.db"},
		{"breaker_failures 0", `{"version": 1, "redis": {"addrs": "x:1", "breaker_failures": 0}}`, false, "redis.breaker_failures"},
		{"breaker_failures 1001", `{"version": 1, "redis": {"addrs": "x:1", "breaker_failures": 1001}}`, false, "redis.breaker_failures"},

		// Bad durations.
		{"period a number", lim(`{"algorithm": "token_bucket", "rate": 1, "period": 1}`), false, "rules[0].limit.period"},
		{"period without unit", lim(`{"algorithm": "token_bucket", "rate": 1, "period": "60"}`), false, "rules[0].limit.period"},
		{"period a fraction", lim(`{"algorithm": "token_bucket", "rate": 1, "period": "1.5s"}`), false, "rules[0].limit.period"},
		{"period unknown unit", lim(`{"algorithm": "token_bucket", "rate": 1, "period": "1sec"}`), false, "rules[0].limit.period"},
		{"period with a space", lim(`{"algorithm": "token_bucket", "rate": 1, "period": "1 s"}`), false, "rules[0].limit.period"},
		{"period negative", lim(`{"algorithm": "token_bucket", "rate": 1, "period": "-1s"}`), false, "rules[0].limit.period"},
		{"period empty", lim(`{"algorithm": "token_bucket", "rate": 1, "period": ""}`), false, "rules[0].limit.period"},
		{"period upper-case unit", lim(`{"algorithm": "token_bucket", "rate": 1, "period": "1S"}`), false, "rules[0].limit.period"},
		{"period 0s", lim(`{"algorithm": "token_bucket", "rate": 1, "period": "0s"}`), false, "rules[0].limit.period"},
		{"window 0ms", lim(`{"algorithm": "fixed_window", "limit": 1, "window": "0ms"}`), false, "rules[0].limit.window"},
		{"warmup 0s", lim(`{"algorithm": "warm_up", "rate": 1, "warmup": "0s"}`), false, "rules[0].limit.warmup"},
		{"lease 0h0m", lim(`{"algorithm": "concurrency", "max": 1, "lease": "0h0m"}`), false, "rules[0].limit.lease"},
		{"ban without unit", tb(`"ban": "600"`), false, "rules[0].ban"},
		{"max_delay a number", tb(`"max_delay": 1`), false, "rules[0].max_delay"},
		{"action delay with max_delay 0s", tb(`"action": "delay", "max_delay": "0s"`), false, "rules[0].max_delay"},
		{"redis timeout bad", `{"version": 1, "redis": {"addrs": "x:1", "timeout": "50"}}`, false, "redis.timeout"},
		{"remote interval bad", `{"version": 1, "remote": {"interval": "5 s"}}`, false, "remote.interval"},

		// Missing required fields.
		{"no version", `{}`, false, "version"},
		{"no version in remote document", `{"rules": []}`, true, "version"},
		{"rule without name", rule(`{"limit": {"algorithm": "token_bucket", "rate": 1}}`), false, "rules[0].name"},
		{"rule without limit", rule(`{"name": "a"}`), false, "rules[0].limit"},
		{"limit without algorithm", lim(`{"rate": 1}`), false, "rules[0].limit.algorithm"},
		{"token_bucket without rate", lim(`{"algorithm": "token_bucket", "burst": 1}`), false, "rules[0].limit.rate"},
		{"warm_up without warmup", lim(`{"algorithm": "warm_up", "rate": 1}`), false, "rules[0].limit.warmup"},
		{"leaky_bucket without rate", lim(`{"algorithm": "leaky_bucket"}`), false, "rules[0].limit.rate"},
		{"fixed_window without window", lim(`{"algorithm": "fixed_window", "limit": 1}`), false, "rules[0].limit.window"},
		{"sliding_window without limit", lim(`{"algorithm": "sliding_window", "window": "1s"}`), false, "rules[0].limit.limit"},
		{"sliding_log without window", lim(`{"algorithm": "sliding_log", "limit": 1}`), false, "rules[0].limit.window"},
		{"concurrency without max", lim(`{"algorithm": "concurrency"}`), false, "rules[0].limit.max"},
		{"action delay without max_delay", tb(`"action": "delay"`), false, "rules[0].max_delay"},
		{"upstream without url", `{"version": 1, "upstreams": [{"name": "a"}]}`, false, "upstreams[0].url"},
		{"upstream without name", `{"version": 1, "upstreams": [{"url": "demo:"}]}`, false, "upstreams[0].name"},
		{"redis without addrs", `{"version": 1, "redis": {}}`, false, "redis.addrs"},
		{"redis with no addrs", `{"version": 1, "redis": {"addrs": []}}`, false, "redis.addrs"},
		{"cluster rule without redis", tb(`"mode": "cluster"`), false, "rules[0].mode"},
		{"remote redis_key without redis", `{"version": 1, "remote": {"redis_key": "k"}}`, false, "remote.redis_key"},

		// Parameters of another algorithm.
		{"token_bucket with window", lim(`{"algorithm": "token_bucket", "rate": 1, "window": "1s"}`), false, "rules[0].limit.window"},
		{"token_bucket with warmup", lim(`{"algorithm": "token_bucket", "rate": 1, "warmup": "1s"}`), false, "rules[0].limit.warmup"},
		{"warm_up with burst", lim(`{"algorithm": "warm_up", "rate": 1, "warmup": "1s", "burst": 2}`), false, "rules[0].limit.burst"},
		{"leaky_bucket with warmup", lim(`{"algorithm": "leaky_bucket", "rate": 1, "warmup": "1s"}`), false, "rules[0].limit.warmup"},
		{"fixed_window with rate", lim(`{"algorithm": "fixed_window", "limit": 1, "window": "1s", "rate": 1}`), false, "rules[0].limit.rate"},
		{"sliding_window with burst", lim(`{"algorithm": "sliding_window", "limit": 1, "window": "1s", "burst": 1}`), false, "rules[0].limit.burst"},
		{"sliding_log with period", lim(`{"algorithm": "sliding_log", "limit": 1, "window": "1s", "period": "1s"}`), false, "rules[0].limit.period"},
		{"concurrency with limit", lim(`{"algorithm": "concurrency", "max": 1, "limit": 1}`), false, "rules[0].limit.limit"},
		{"concurrency with nodelay", lim(`{"algorithm": "concurrency", "max": 1, "nodelay": true}`), false, "rules[0].limit.nodelay"},
		{"leaky_bucket nodelay with delay", lim(`{"algorithm": "leaky_bucket", "rate": 1, "nodelay": true, "delay": 1}`), false, "rules[0].limit.nodelay"},

		// Exceptions and unlimited rules.
		{"unlimited without match", rule(`{"name": "u", "unlimited": true}`), false, "rules[0].match"},
		{"unlimited with empty match", rule(`{"name": "u", "unlimited": true, "match": {}}`), false, "rules[0].match"},
		{"unlimited with a limit", rule(`{"name": "u", "unlimited": true, "match": {"paths": "/x"}, "limit": {"algorithm": "token_bucket", "rate": 1}}`), false, "rules[0].limit"},
		{"unlimited with reply", rule(`{"name": "u", "unlimited": true, "match": {"paths": "/x"}, "reply": {"status": 503}}`), false, "rules[0].reply"},
		{"no limit, not unlimited", rule(`{"name": "u", "unlimited": false, "match": {"paths": "/x"}}`), false, "rules[0].limit"},
		{"empty exception", tb(`"match": {"not": {}}`), false, "rules[0].match.not"},
		{"exception of an exception", tb(`"match": {"not": {"paths": "/x", "not": {"paths": "/y"}}}`), false, "rules[0].match.not.not"},
		{"client not an address", tb(`"match": {"clients": ["localhost"]}`), false, "rules[0].match.clients[0]"},
		{"client with a port", tb(`"match": {"clients": "10.0.0.1:80"}`), false, "rules[0].match.clients[0]"},
		{"empty consumer", tb(`"match": {"consumers": ""}`), false, "rules[0].match.consumers"},

		// Patterns and formats.
		{"name with a space", rule(`{"name": "per ip", "limit": {"algorithm": "token_bucket", "rate": 1}}`), false, "rules[0].name"},
		{"name of 65 characters", rule(`{"name": "` + strings.Repeat("a", 65) + `", "limit": {"algorithm": "token_bucket", "rate": 1}}`), false, "rules[0].name"},
		{"name with a colon", rule(`{"name": "a:b", "limit": {"algorithm": "token_bucket", "rate": 1}}`), false, "rules[0].name"},
		{"unknown dimension", tb(`"by": ["ipaddr"]`), false, "rules[0].by[0]"},
		{"dimension in upper case", tb(`"by": "IP"`), false, "rules[0].by[0]"},
		{"header without name", tb(`"by": ["header"]`), false, "rules[0].by[0]"},
		{"header with empty name", tb(`"by": ["ip", "header:"]`), false, "rules[0].by[1]"},
		{"header name with a space", tb(`"by": ["header:X Y"]`), false, "rules[0].by[0]"},
		{"header name with a colon", tb(`"by": ["header:X:Y"]`), false, "rules[0].by[0]"},
		{"device name invalid", tb(`"by": ["device:a/b"]`), false, "rules[0].by[0]"},
		{"argument to ip", tb(`"by": ["ip:v4"]`), false, "rules[0].by[0]"},
		{"method in lower case", tb(`"match": {"methods": ["GET", "post"]}`), false, "rules[0].match.methods"},
		{"empty method", tb(`"match": {"methods": ""}`), false, "rules[0].match.methods"},
		{"relative path", tb(`"match": {"paths": "api/**"}`), false, "rules[0].match.paths"},
		{"empty path", tb(`"match": {"paths": [""]}`), false, "rules[0].match.paths"},
		{"** inside a path", tb(`"match": {"paths": "/a/**/b"}`), false, "rules[0].match.paths"},
		{"* inside a segment", tb(`"match": {"paths": "/a*"}`), false, "rules[0].match.paths"},
		{"*** segment", tb(`"match": {"paths": "/***"}`), false, "rules[0].match.paths"},
		{"host *", tb(`"match": {"hosts": "*"}`), false, "rules[0].match.hosts"},
		{"host *example.com", tb(`"match": {"hosts": "*example.com"}`), false, "rules[0].match.hosts"},
		{"host with inner *", tb(`"match": {"hosts": "api.*.com"}`), false, "rules[0].match.hosts"},
		{"empty host", tb(`"match": {"hosts": [""]}`), false, "rules[0].match.hosts"},
		{"empty header name", tb(`"match": {"headers": {"": "x"}}`), false, "rules[0].match.headers."},
		{"header name with a space", tb(`"match": {"headers": {"X Y": "x"}}`), false, "rules[0].match.headers.X Y"},
		{"empty header value", tb(`"match": {"headers": {"X-A": ""}}`), false, "rules[0].match.headers.X-A"},
		{"host with a port", tb(`"match": {"hosts": "example.com:8080"}`), false, "rules[0].match.hosts"},
		{"host *.", tb(`"match": {"hosts": "*."}`), false, "rules[0].match.hosts"},
		{"host with an empty label", tb(`"match": {"hosts": "a..b"}`), false, "rules[0].match.hosts"},
		{"host with a slash", tb(`"match": {"hosts": "a/b"}`), false, "rules[0].match.hosts"},
		{"IPv6 host without brackets", tb(`"match": {"hosts": "2001:db8::1"}`), false, "rules[0].match.hosts"},
		{"upstream url without scheme", `{"version": 1, "upstreams": [{"name": "a", "url": "127.0.0.1:9000"}]}`, false, "upstreams[0].url"},
		{"upstream url ftp", `{"version": 1, "upstreams": [{"name": "a", "url": "ftp://example.com"}]}`, false, "upstreams[0].url"},
		{"upstream url without host", `{"version": 1, "upstreams": [{"name": "a", "url": "http:///x"}]}`, false, "upstreams[0].url"},
		{"upstream bad match", `{"version": 1, "upstreams": [{"name": "a", "url": "demo:", "match": {"paths": "x"}}]}`, false, "upstreams[0].match.paths"},
		{"remote url ftp", `{"version": 1, "remote": {"url": "ftp://example.com/x"}}`, false, "remote.url"},
		{"remote url without host", `{"version": 1, "remote": {"url": "https:///x"}}`, false, "remote.url"},
		{"remote url and redis_key", `{"version": 1, "redis": {"addrs": "x:1"}, "remote": {"url": "https://a.example/x", "redis_key": "k"}}`, false, "remote.redis_key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			schemaErr, _, goErr := v.check(parse(t, tt.doc), tt.remote)
			if schemaErr == nil {
				t.Errorf("schema accepts it")
			}
			if goErr == nil {
				t.Fatalf("decoder accepts it")
			}
			want := "doc: " + tt.path + ": "
			if tt.path == "" {
				want = "doc: "
			}
			if !strings.Contains(goErr.Error(), want) {
				t.Errorf("decoder error %q does not name %q", goErr, tt.path)
			}
		})
	}
}

// node is a schema object with the instance path it describes.
type node struct {
	file string   // the schema file it is in
	ptr  string   // its JSON pointer in that file
	path []string // instance path: keys, "[]" for a list item
	s    map[string]any
}

// property is one entry of a "properties" keyword.
type property struct {
	node
	branch bool // in the then-branch of a condition: it only narrows the main property
}

// schemaSet holds the schema files, parsed, for walking.
type schemaSet map[string]map[string]any

func loadSchemas(t *testing.T) schemaSet {
	t.Helper()
	set := schemaSet{}
	for _, name := range []string{RuleFile, LimitFile, DianadFile, RulesFile} {
		var m map[string]any
		dec := json.NewDecoder(bytes.NewReader(read(t, name)))
		dec.UseNumber() // numbers keep their text: 2^53 stays an integer
		if err := dec.Decode(&m); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		set[name] = m
	}
	return set
}

// resolve follows a $ref from file.
func (set schemaSet) resolve(t *testing.T, file, ref string) (string, string, map[string]any) {
	t.Helper()
	target, frag, _ := strings.Cut(ref, "#")
	if target != "" {
		file = target
	}
	cur, ok := set[file]
	if !ok {
		t.Fatalf("%s: $ref %q: no such schema", file, ref)
	}
	var v any = cur
	for _, p := range strings.Split(strings.TrimPrefix(frag, "/"), "/") {
		if p == "" {
			continue
		}
		m, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("%s: $ref %q does not resolve", file, ref)
		}
		v = m[p]
	}
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("%s: $ref %q does not resolve to a schema", file, ref)
	}
	return file, frag, m
}

// properties walks the schema of a document and returns every property it describes.
func (set schemaSet) properties(t *testing.T, root string) []property {
	t.Helper()
	var out []property
	seen := map[string]bool{}
	var walk func(n node, branch bool)
	walk = func(n node, branch bool) {
		key := n.file + "#" + n.ptr + "@" + strings.Join(n.path, ".")
		if seen[key] {
			return
		}
		seen[key] = true
		if ref, ok := n.s["$ref"].(string); ok {
			f, ptr, s := set.resolve(t, n.file, ref)
			walk(node{file: f, ptr: ptr, path: n.path, s: s}, branch)
		}
		if props, ok := n.s["properties"].(map[string]any); ok {
			names := make([]string, 0, len(props))
			for k := range props {
				names = append(names, k)
			}
			sort.Strings(names)
			for _, k := range names {
				child := node{file: n.file, ptr: n.ptr + "/properties/" + k, path: append(slices.Clip(n.path), k), s: props[k].(map[string]any)}
				out = append(out, property{node: child, branch: branch})
				walk(child, branch)
			}
		}
		if items, ok := n.s["items"].(map[string]any); ok {
			walk(node{file: n.file, ptr: n.ptr + "/items", path: append(slices.Clip(n.path), "[]"), s: items}, branch)
		}
		if ap, ok := n.s["additionalProperties"].(map[string]any); ok && ap["properties"] != nil { // an object of objects
			child := node{file: n.file, ptr: n.ptr + "/additionalProperties", path: append(slices.Clip(n.path), "*"), s: ap}
			out = append(out, property{node: child, branch: branch})
			walk(child, branch)
		}
		for _, kw := range []string{"allOf", "anyOf", "oneOf"} {
			list, _ := n.s[kw].([]any)
			for i, e := range list {
				walk(node{file: n.file, ptr: n.ptr + "/" + kw + "/" + strconv.Itoa(i), path: n.path, s: e.(map[string]any)}, branch)
			}
		}
		for _, kw := range []string{"then", "else"} {
			if s, ok := n.s[kw].(map[string]any); ok {
				walk(node{file: n.file, ptr: n.ptr + "/" + kw, path: n.path, s: s}, true)
			}
		}
		// "if" and "not" only test values: the properties they name are described elsewhere.
	}
	walk(node{file: root, s: set[root]}, false)
	return out
}

// Every property is described, and has a default or an example (a property that is only a
// $ref to another has that one's); every record closes its properties with additionalProperties
// false.
func TestSchemaAnnotations(t *testing.T) {
	set := loadSchemas(t)
	for _, root := range []string{DianadFile, RulesFile} {
		for _, p := range set.properties(t, root) {
			where := p.file + "#" + p.ptr
			s := p.s
			if ref, ok := s["$ref"].(string); ok && len(s) == 1 {
				_, _, s = set.resolve(t, p.file, ref)
			}
			d, _ := s["description"].(string)
			if n := len([]rune(d)); n < 10 || n > 300 {
				t.Errorf("%s: description of %d characters, want 10 to 300", where, n)
			}
			_, hasDefault := s["default"]
			examples, _ := s["examples"].([]any)
			if !hasDefault && len(examples) == 0 {
				t.Errorf("%s: neither default nor examples", where)
			}
		}
	}
	// Records: every schema object with "properties" outside a condition.
	var walk func(file, ptr string, v any, cond bool)
	walk = func(file, ptr string, v any, cond bool) {
		switch v := v.(type) {
		case map[string]any:
			if _, ok := v["properties"]; ok && !cond && v["additionalProperties"] != false {
				t.Errorf("%s#%s: properties without additionalProperties false", file, ptr)
			}
			for k, e := range v {
				walk(file, ptr+"/"+k, e, cond || k == "if" || k == "then" || k == "else" || k == "not")
			}
		case []any:
			for i, e := range v {
				walk(file, ptr+"/"+strconv.Itoa(i), e, cond)
			}
		}
	}
	for file, s := range set {
		walk(file, "", s, false)
	}
}

// setPath sets path (keys, "[]" for the first item of a list) to val in the tree root,
// creating objects on the way. It reports whether the path could be followed (a list must
// have a first item) and whether the property was there before.
func setPath(root conf.Value, path []string, val conf.Value) (ok, existed bool) {
	cur := root
	for i, k := range path {
		last := i == len(path)-1
		if k == "[]" {
			l, isList := cur.([]conf.Value)
			if !isList || len(l) == 0 || last {
				return false, false
			}
			cur = l[0]
			continue
		}
		o, isObj := cur.(*conf.Object)
		if !isObj {
			return false, false
		}
		old, has := o.Get(k)
		if last {
			o.Set(k, val)
			return true, has
		}
		if !has {
			old = &conf.Object{}
			o.Set(k, old)
		}
		cur = old
	}
	return false, false
}

// baseDocs are minimal valid documents, in which each property is set in turn.
func baseDocs() []doc {
	docs := []doc{
		{json: `{"version": 1}`},
		{json: `{"version": 1, "redis": {"addrs": "127.0.0.1:6379"}}`},
		{json: `{"version": 1, "redis": {"addrs": "127.0.0.1:6379"}, "remote": {"redis_key": "diana:config"}}`},
		{json: `{"version": 1, "remote": {"url": "https://config.example.com/diana.yaml"}}`},
		{json: `{"version": 1, "upstreams": [{"name": "a", "url": "http://127.0.0.1:9000"}]}`},
		{json: `{"version": 1, "rls": {"listen": "127.0.0.1:8081", "config_dir": "/etc/dianad/ratelimit"}}`},
		{json: `{"version": 1, "redis": {"addrs": "127.0.0.1:6379"}, "rls": {"listen": "127.0.0.1:8081", "config_dir": "/etc/dianad/ratelimit", "mode": "cluster"}}`},
		{json: `{"version": 1, "redis": {"addrs": "127.0.0.1:6379"}, "rls": {"listen": "127.0.0.1:8081", "config_dir": "/etc/dianad/ratelimit", "mode": "cluster", "on_error": "local"}}`},
		{json: `{"version": 1}`, remote: true},
	}
	batched := `{"version": 1, "redis": {"addrs": "127.0.0.1:6379"}, "rules": [{"name": "r", "mode": "cluster", "limit": {"algorithm": "fixed_window", "limit": 100, "window": "1s"}, "batch": {"max": 10}}]}`
	for _, u := range []string{`{"body": "usage.total_tokens"}`, `{"header": "x-usage-total-tokens"}`, `{"format": "openai"}`,
		`{"format": "openai", "prices": {"default": {"input": 1, "output": 1}, "*": {"input": 1, "output": 1}}}`} {
		rule := `"rules": [{"name": "r", "usage": ` + u + `, "limit": {"algorithm": "token_bucket", "rate": 100}}]}`
		docs = append(docs, doc{json: `{"version": 1, ` + rule}, doc{json: `{"version": 1, ` + rule, remote: true})
	}
	docs = append(docs, doc{json: batched},
		doc{json: `{"version": 1, "rules": [{"name": "r", "mode": "cluster", "limit": {"algorithm": "token_bucket", "rate": 100}, "batch": {"max": 10}}]}`, remote: true})
	for _, limit := range minimalLimits() {
		docs = append(docs,
			doc{json: `{"version": 1, "rules": [{"name": "r", "limit": ` + limit + `}]}`},
			doc{json: `{"version": 1, "rules": [{"name": "r", "limit": ` + limit + `}]}`, remote: true})
	}
	return docs
}

// Every property of the schemas, set to its default or its first example inside an otherwise
// valid document, is accepted by the decoder wherever the schema accepts it; a default decodes
// to exactly what the absent property does.
func TestEveryPropertyDecodes(t *testing.T) {
	v := compile(t)
	set := loadSchemas(t)
	for _, root := range []string{DianadFile, RulesFile} {
		remote := root == RulesFile
		for _, p := range set.properties(t, root) {
			name := root + ":" + strings.Join(p.path, ".")
			raw, isDefault := p.s["default"]
			if !isDefault {
				examples, _ := p.s["examples"].([]any)
				if len(examples) == 0 {
					continue // TestSchemaAnnotations reports it
				}
				raw = examples[0]
			}
			js, err := json.Marshal(raw)
			if err != nil {
				t.Fatal(err)
			}
			accepted := 0
			for _, b := range baseDocs() {
				if b.remote != remote {
					continue
				}
				d := parse(t, b.json)
				ok, existed := setPath(d, p.path, parse(t, string(js)))
				if !ok || existed && isDefault {
					continue
				}
				if v.schemaFor(remote).Validate(instance(d)) != nil {
					continue // the property does not apply here (another algorithm's parameter)
				}
				accepted++
				got, err := server.Decode(d, "doc", remote)
				if err != nil {
					t.Errorf("%s = %s in %s: the schema accepts it, the decoder does not: %v", name, js, b.json, err)
					break
				}
				if isDefault && !existed {
					want, err := server.Decode(parse(t, b.json), "doc", remote)
					if err != nil {
						t.Fatalf("base document %s: %v", b.json, err)
					}
					if !reflect.DeepEqual(got, want) {
						t.Errorf("%s: the schema's default %s decodes differently from the absent field in %s", name, js, b.json)
						break
					}
				}
			}
			if accepted == 0 {
				t.Errorf("%s = %s: no base document where the schema accepts it", name, js)
			}
		}
	}
}

// The important defaults, read from the schema, are the Go decoder's.
func TestRuleDefaults(t *testing.T) {
	set := loadSchemas(t)
	props := map[string]any{}
	for _, p := range set.properties(t, DianadFile) {
		if d, ok := p.s["default"]; ok && !p.branch {
			props[strings.Join(p.path, ".")] = d
		}
	}
	cfg, err := server.Decode(parse(t, `{"version": 1, "rules": [{"name": "a", "limit": {"algorithm": "concurrency", "max": 1}}]}`), "doc", false)
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Rules[0]
	integer := func(d any) int64 {
		n, err := d.(json.Number).Int64()
		if err != nil {
			t.Fatalf("schema default %v: %v", d, err)
		}
		return n
	}
	us := func(s string) any {
		d, reason := conf.ParseDuration(s)
		if reason != "" {
			t.Fatalf("schema default %q: %s", s, reason)
		}
		return d
	}
	checks := []struct {
		path string
		got  any
		conv func(any) any
	}{
		{"rules.[].cost", r.Cost, func(d any) any { return integer(d) }},
		{"rules.[].nodes", r.Nodes, func(d any) any { return integer(d) }},
		{"rules.[].mode", r.Mode.String(), nil},
		{"rules.[].action", r.Action.String(), nil},
		{"rules.[].on_error", r.OnError.String(), nil},
		{"rules.[].max_delay", r.MaxDelay, func(d any) any { return us(d.(string)) }},
		{"rules.[].ban", r.Ban, func(d any) any { return us(d.(string)) }},
		{"rules.[].by", r.By, func(d any) any {
			var s []string
			for _, e := range d.([]any) {
				s = append(s, e.(string))
			}
			return s
		}},
		{"rules.[].reply.status", r.Reply.Status, func(d any) any { return int(integer(d)) }},
		{"rules.[].reply.message", r.Reply.Message, nil},
		{"rules.[].reply.headers", rules.HeaderStyleNames[r.Reply.Headers], nil},
		{"rules.[].reply.legacy_headers", r.Reply.Legacy, nil},
		{"listen", cfg.Listen, nil},
		{"admin.listen", cfg.Admin.Listen, nil},
		{"local_store.max_keys", cfg.LocalStore.MaxKeys, func(d any) any { return int(integer(d)) }},
		{"connections.keepalive_timeout", cfg.Connections.KeepaliveTimeout, func(d any) any { return time.Duration(us(d.(string)).(int64)) * time.Microsecond }},
		{"admin.connections.send_timeout", cfg.Admin.Connections.SendTimeout, func(d any) any { return time.Duration(us(d.(string)).(int64)) * time.Microsecond }},
		{"ipv6_prefix", cfg.IPv6Prefix, func(d any) any { return int(integer(d)) }},
		{"escaped_slashes", rules.EscapedSlashesNames[cfg.EscapedSlashes], nil},
		{"client_ip_header", httplimit.ClientIPHeaderNames[cfg.ClientIPHeader], nil},
		{"strip_trailing_dots_spaces", cfg.StripDots, nil},

		{"remote.interval", cfg.Remote.Interval, func(d any) any { return time.Duration(us(d.(string)).(int64)) * time.Microsecond }},
	}
	for _, c := range checks {
		d, ok := props[c.path]
		if !ok {
			t.Errorf("%s: no default in the schema", c.path)
			continue
		}
		if c.conv != nil {
			d = c.conv(d)
		}
		if !reflect.DeepEqual(d, c.got) {
			t.Errorf("%s: schema default %v, decoder %v", c.path, d, c.got)
		}
	}
	if r.Mode != rules.Local || r.Action != rules.Reject || r.OnError != rules.FailOpen || r.Reply.Message != rules.DefaultMessage {
		t.Errorf("unexpected decoder defaults: %+v", r)
	}
	if lease := props["rules.[].limit.lease"]; us(lease.(string)) != algos.Minute {
		t.Errorf("lease default %v, decoder 1m", lease)
	}
}

// decoderKeys returns every field name the Go decoders read: the string literals given to the
// conf.Obj getters (and to Require and Has) in shared/rules and server/config.go.
func decoderKeys(t *testing.T) map[string]bool {
	t.Helper()
	getters := map[string]bool{"String": true, "Int": true, "Bool": true, "Duration": true, "Enum": true,
		"Strings": true, "StringMap": true, "Obj": true, "Objs": true, "EnumIndex": true, "List": true, "Has": true, "Require": true, "Refuse": true}
	files, err := filepath.Glob(filepath.Join("..", "shared", "rules", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join("..", "server", "config.go"))
	keys := map[string]bool{}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		imports := map[string]bool{}
		for _, im := range f.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			n := p[strings.LastIndexByte(p, '/')+1:]
			if im.Name != nil {
				n = im.Name.Name
			}
			imports[n] = true
		}
		literal := func(e ast.Expr) {
			if bl, ok := e.(*ast.BasicLit); ok && bl.Kind == token.STRING {
				s, _ := strconv.Unquote(bl.Value)
				keys[s] = true
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			switch fun := call.Fun.(type) {
			case *ast.SelectorExpr:
				recv, ok := fun.X.(*ast.Ident)
				if !ok || imports[recv.Name] || !getters[fun.Sel.Name] {
					return true
				}
				if fun.Sel.Name == "Require" {
					for _, a := range call.Args {
						literal(a)
					}
				} else {
					literal(call.Args[0])
				}
			case *ast.Ident:
				if (fun.Name == "readPEM" || fun.Name == "duration") && len(call.Args) > 1 {
					literal(call.Args[1])
				}
				if fun.Name == "secret" && len(call.Args) > 2 {
					literal(call.Args[1])
					literal(call.Args[2])
				}
			}
			return true
		})
	}
	return keys
}

// The schemas name exactly the fields the decoders read, and every field of the valid
// documents is a schema property at its place.
func TestSchemaCoversDecoder(t *testing.T) {
	set := loadSchemas(t)
	schemaNames := map[string]bool{}
	schemaPaths := map[string]bool{}
	for _, root := range []string{DianadFile, RulesFile} {
		for _, p := range set.properties(t, root) {
			if name := p.path[len(p.path)-1]; name != "*" { // an object of objects' values: no name of its own
				schemaNames[name] = true
			}
			schemaPaths[root+":"+strings.Join(p.path, ".")] = true
		}
	}
	read := decoderKeys(t)
	for _, name := range usage.ClassNames { // the token classes' names are read from their list
		read[name] = true
	}
	for _, name := range rules.Algorithms() { // the parameters' names are read from the registry
		k, _ := rules.Algorithm(name)
		for _, p := range k.Params {
			read[p.Name] = true
		}
	}
	if len(read) < 40 {
		t.Fatalf("found only %d field names in the decoders: %v", len(read), read)
	}
	for k := range read {
		if !schemaNames[k] {
			t.Errorf("the decoder reads %q, which no schema names", k)
		}
	}
	for k := range schemaNames {
		if !read[k] {
			t.Errorf("the schema names %q, which the decoder never reads", k)
		}
	}

	// Walk the valid documents: each key is a property of the schema at that place (the
	// values of the string maps, match.headers and remote.headers, excepted).
	covered, reported := map[string]bool{}, map[string]bool{}
	for name, d := range validDocs() {
		root := DianadFile
		if d.remote {
			root = RulesFile
		}
		var walk func(v conf.Value, path []string)
		walk = func(v conf.Value, path []string) {
			switch v := v.(type) {
			case *conf.Object:
				if n := len(path); n > 0 && path[n-1] == "headers" && !(n > 1 && path[n-2] == "reply") {
					return // a map of header names
				}
				for i, k := range v.Keys {
					if n := len(path); n > 0 && path[n-1] == "prices" {
						k = "*" // a map of model names
					}
					p := append(slices.Clip(path), k)
					key := root + ":" + strings.Join(p, ".")
					if !schemaPaths[key] && !reported[key] {
						reported[key] = true
						t.Errorf("%s: field %s is not in the schema", name, strings.Join(p, "."))
					}
					covered[key] = true
					walk(v.Vals[i], p)
				}
			case []conf.Value:
				for _, e := range v {
					walk(e, append(slices.Clip(path), "[]"))
				}
			}
		}
		walk(parse(t, d.json), nil)
	}
	// And the valid documents set every property of the schemas.
	for k := range schemaPaths {
		if !covered[k] {
			t.Errorf("no valid test document sets %s", k)
		}
	}
}

// listens are listener addresses, valid and not.
var listens = []string{
	"", ":8080", "0.0.0.0:80", "127.0.0.1:9090", "[::]:443", "[::1]:0", "localhost:65535", ":0",
	":99999", ":65536", "8080", "localhost", ":", ":080", "::1:80", "a:b:80", ":-1", ": 80", "[::1]80",
}

// The schema's patterns and the decoder's checks give the same verdict on each value.
func TestPatternsAgree(t *testing.T) {
	v := compile(t)
	tests := []struct {
		field  string
		doc    string // %s is the value, as a JSON string
		values []string
	}{
		{"ban (a duration)", tb(`"ban": %s`), []string{
			"0s", "1s", "1m30s", "1d2h3m4s5ms6us7µs", "01s", "315360000000000us", "10y", "1w", "10m0s",
			"", "1", "s", "1.5s", "1 s", " 1s", "1s ", "1S", "-1s", "+1s", "1h1", "1mus", "1sm", "1msms",
			"1hs", "1dd", "1µsx", "1mµs", "1ns", "0000000000000000000001s", "1e3s", "0x10s", "１s",
		}},
		{"period (a duration above 0)", lim(`{"algorithm": "token_bucket", "rate": 1, "period": %s}`), []string{
			"1us", "1µs", "1ms", "1s", "0s1us", "00000001s", "0s", "0ms0us", "000d",
		}},
		{"by", tb(`"by": %s`), []string{
			"global", "ip", "consumer", "route", "path", "method", "host", "header:X-Api-Key",
			"header:x_y.z~!#$%&'*+^`|", "device", "device:X-Phone-Id",
			"", "GLOBAL", "Ip", "foo", "header", "header:", "header:X Y", "header:X:Y", "header:é",
			"device:a/b", "ip:v4", "global:x", " ip", "ip ",
		}},
		{"match.methods", tb(`"match": {"methods": %s}`), []string{
			"GET", "POST", "M-SEARCH", "PURGE", "*", "GET POST",
			"", "get", "Get", "gET",
		}},
		{"match.paths", tb(`"match": {"paths": %s}`), []string{
			"/", "/a", "/a/", "//", "/a/*", "/a/*/b", "/*", "/**", "/a/**", "/*/**", "/a b/c%20d", "/ä",
			"", "a", "a/b", "*", "**", "/**/a", "/a/**/", "/a*", "/*a", "/***", "/a/**b",
			"/a;b", "/a?b", "/a#b", `/a\b`, "/a/b;c/**",
		}},
		{"match.hosts", tb(`"match": {"hosts": %s}`), []string{
			"example.com", "EXAMPLE.COM", "*.example.com", "localhost", "a_b-c.d", "[::1]", "[2001:DB8::1]", "192.0.2.1", "x",
			"", "*", "*.", "*example.com", "api.*.com", "a..b", ".a", "a.", "example.com:8080", "2001:db8::1", "[]", "[x]", "a b", "ä.com",
		}},
		{"match.headers name", tb(`"match": {"headers": {%s: "*"}}`), []string{
			"X-Api-Key", "x", "!#$%&'*+.^_`|~", "", "X Y", "X:Y", "é",
		}},
		{"upstream url", `{"version": 1, "upstreams": [{"name": "a", "url": %s}]}`, []string{
			"http://127.0.0.1:9000", "https://example.com/base", "HTTP://example.com", "http://u:p@example.com", "demo:", "demo:x",
			"", "127.0.0.1:9000", "example.com", "ftp://example.com", "http://", "http:///x", "http:example.com", "//example.com",
		}},
		{"listen", `{"version": 1, "listen": %s}`, listens},
		{"admin.listen", `{"version": 1, "admin": {"listen": %s, "token": "t"}}`, listens}, // a token: any address may listen
		{"redis.addrs", `{"version": 1, "redis": {"addrs": [%s]}}`, []string{
			"127.0.0.1:6379", "redis:6379", "[::1]:6379", "a:1", "a:65535",
			"", ":6379", "redis", "redis:", "redis:0", "redis:65536", "redis:99999", "redis:06379", "[::1]", "::1:6379", "a:b:1", "redis:+1", "redis:1x",
		}},
		{"remote url", `{"version": 1, "remote": {"url": %s}}`, []string{
			"", "http://example.com", "https://example.com/diana.yaml?x=1", "HTTPS://example.com",
			"ftp://example.com", "demo:", "http://", "https:///x", "example.com",
		}},
	}
	for _, tt := range tests {
		for _, val := range tt.values {
			js, _ := json.Marshal(val)
			d := parse(t, strings.Replace(tt.doc, "%s", string(js), 1))
			schemaErr, _, goErr := v.check(d, false)
			if (schemaErr == nil) != (goErr == nil) {
				t.Errorf("%s %s: schema error %v, decoder error %v", tt.field, js, schemaErr, goErr)
			}
		}
	}
}

// The complete documents of docs/configuration.md (its YAML blocks that start with "version:")
// are valid for both; those with only version and rules as remote documents.
func TestDocsExamples(t *testing.T) {
	v := compile(t)
	md, err := os.ReadFile(filepath.Join("..", "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for i, block := range strings.Split(string(md), "```yaml\n")[1:] {
		block, _, _ = strings.Cut(block, "```")
		if !strings.HasPrefix(block, "version:") {
			continue
		}
		n++
		name := "docs/configuration.md yaml block " + strconv.Itoa(i+1)
		val, err := config.Decode([]byte(block), name+".yaml")
		if err != nil {
			t.Fatal(err)
		}
		o, _ := val.(*conf.Object)
		if o == nil {
			t.Fatalf("%s: not a mapping", name)
		}
		remote := !slices.ContainsFunc(o.Keys, func(k string) bool { return k != "version" && k != "rules" })
		schemaErr, _, goErr := v.check(val, remote)
		if schemaErr != nil {
			t.Errorf("%s (remote %v): schema rejects it: %v", name, remote, schemaErr)
		}
		if goErr != nil {
			t.Errorf("%s (remote %v): decoder rejects it: %v", name, remote, goErr)
		}
	}
	if n < 2 {
		t.Errorf("found %d complete documents in docs/configuration.md, want at least 2", n)
	}
}
