package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/diana-gw/diana/shared/conf"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/memstore"
)

// FuzzParseConfig: decoding any config JSON never panics (go-pdk has no recover: a panic would
// kill the plugin server); every error of a Kong-sent config names a flat field of the schema,
// one of Kong's keys, or the root; a config that strict decoding accepts, the lenient one accepts too, with the
// same rules; a valid config gives rules, named after the instance, that an engine accepts.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		`{}`,
		`{"__plugin_id": "p1", "limit_by": "header", "header_name": "X-Api-Key", "limit": 10, "window": "1s"}`,
		`{"algorithm": "token_bucket", "limit": 5, "window": "1m", "burst": 10, "ip_limit": 3, "device_limit": 2, "device_header": "X-Dev"}`,
		`{"algorithm": "concurrency", "limit": 2, "window": "30s", "shadow": true, "hide_client_headers": true}`,
		`{"policy": "redis", "redis_addrs": ["a:1", "[::1]:6379"], "fallback_nodes": 3, "redis_prefix": "x:"}`,
		`{"policy": "redis", "redis_host": "", "redis_prefix": ""}`,
		`{"limit_by": "path", "path": "/a/*/**", "error_code": 503, "error_message": "\u0000\ud800"}`,
		`{"limit": 1e400, "window": "99999999999999999d", "ban": "-1s", "limit_by": null}`,
		`{"route_id": null, "service_id": "s", "consumer_id": null, "__seq__": 3, "unknown": [1, {}]}`,
		`{"algorithm": ""}`, `[1]`, `null`, `"x"`,
		`{"policy": "redis", "redis_addrs": ["a:1", "host:65536", 5], "window": "1m30s", "path": "/x", "batch_max": 3}`,
		`{"algorithm": "leaky_bucket", "limit": 1, "window": "10y", "burst": 1, "policy": "redis", "fallback_nodes": 7}`,
	} {
		f.Add([]byte(s))
	}
	fields := map[string]bool{"": true, "__plugin_id": true, "service_id": true} // the root, Kong's keys
	for _, fd := range resolvedFields() {
		fields[fd.Name] = true
	}
	mem := memstore.New(memstore.Options{MaxEntries: 64})
	store := rules.Each(mem.Decide)
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := parse(data, false)
		strictS, strictErr := parse(data, true)
		if err != nil {
			if strictErr == nil {
				t.Fatalf("strict decoding accepts what lenient decoding refuses: %v", err)
			}
			var errs *conf.Errors
			if errors.As(err, &errs) {
				for _, e := range errs.List {
					name, _, _ := strings.Cut(e.Path, "[") // an array's element: redis_addrs[1]
					if !fields[name] || e.Reason == "" {
						t.Fatalf("error %q: %q is not a field of the plugin's schema", e.Path+": "+e.Reason, e.Path)
					}
				}
			}
			return
		}
		if strictErr == nil && ruleNames(strictS) != ruleNames(s) {
			t.Fatalf("strict rules %s, lenient %s", ruleNames(strictS), ruleNames(s))
		}
		if len(s.Rules) == 0 {
			t.Fatal("a valid config without rules")
		}
		scope := s.PluginID
		if scope == "" {
			scope = "diana"
		}
		for _, r := range s.Rules {
			if r.Alg == nil || !strings.HasPrefix(r.Name, scope+".") {
				t.Fatalf("rule %q (algorithm %v) in the instance %q", r.Name, r.Alg, scope)
			}
			if (s.Redis != nil) != (r.Mode == rules.Cluster) {
				t.Fatalf("rule %s in mode %d with redis %v", r.Name, r.Mode, s.Redis)
			}
		}
		if _, err := rules.New(s.Rules, rules.Options{Local: store, Cluster: store}); err != nil {
			t.Fatalf("valid config refused by the engine: %v", err)
		}
	})
}

func ruleNames(s *settings) string {
	var names []string
	for _, r := range s.Rules {
		names = append(names, r.Name)
	}
	return strings.Join(names, ",")
}
