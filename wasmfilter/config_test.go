package main

import (
	"strings"
	"testing"

	"github.com/diana-gw/diana/shared/rules"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// A bad configuration fails the plugin's start with a critical log naming the field.
func TestBadConfig(t *testing.T) {
	rule := func(extra string) string {
		return `{"rules": [{"name": "r", "limit": {"algorithm": "fixed_window", "limit": 3, "window": "1m"}` + extra + `}]}`
	}
	for _, tc := range []struct{ name, cfg, want string }{
		{"empty", ``, "is empty"},
		{"not json", `{"rules": [}`, "diana"},
		{"not an object", `[]`, "must be an object"},
		{"nothing to do", `{}`, "rules: is required unless cluster is set"},
		{"unknown field", `{"rules": [], "slotz": 3}`, "slotz"},
		{"bad rate", `{"rules": [{"name": "r", "limit": {"algorithm": "token_bucket", "rate": -1}}]}`, "rules[0].limit.rate"},
		{"cluster rule", rule(`, "mode": "cluster"`), "rules[0].mode: must be local"},
		{"delay", rule(`, "action": "delay", "max_delay": "1s"`), "rules[0].action: delay is not supported"},
		{"sliding log", `{"rules": [{"name": "r", "limit": {"algorithm": "sliding_log", "limit": 3, "window": "1m"}}]}`, "rules[0].limit.algorithm: sliding_log keeps a log"},
		{"3 sub-windows", `{"rules": [{"name": "r", "limit": {"algorithm": "sliding_window", "limit": 3, "window": "1m", "subwindows": 3}}]}`, "rules[0].limit.subwindows: the filter's shared-data slots hold 4 numbers per client: at most 2 sub-windows"},
		{"concurrency", `{"rules": [{"name": "r", "limit": {"algorithm": "concurrency", "max": 3}}]}`, "rules[0].limit.algorithm: concurrency holds a lease per request in flight"},
		{"adaptive by ip", adaptiveBy(`["ip"]`), `rules[0].by: adaptive may count only by global or route in the Envoy filter, got "ip": its state takes a shared-data key per value, which Envoy never deletes`},
		{"adaptive by header", adaptiveBy(`["header:X-Api-Key"]`), `rules[0].by: adaptive may count only by global or route in the Envoy filter, got "header:X-Api-Key"`},
		{"adaptive by path", adaptiveBy(`"path"`), `rules[0].by: adaptive may count only by global or route in the Envoy filter, got "path"`},
		{"adaptive by method", adaptiveBy(`["method"]`), `rules[0].by: adaptive may count only by global or route in the Envoy filter, got "method"`},
		{"adaptive by host", adaptiveBy(`["host"]`), `rules[0].by: adaptive may count only by global or route in the Envoy filter, got "host"`},
		{"adaptive by device", adaptiveBy(`["device"]`), `rules[0].by: adaptive may count only by global or route in the Envoy filter, got "device"`},
		{"adaptive by route and ip", adaptiveBy(`["route", "ip"]`), `rules[0].by: adaptive may count only by global or route in the Envoy filter, got "ip"`},
		{"adaptive by consumer", `{"consumer_header": "x-c", "rules": [{"name": "a", "by": ["consumer"], "limit": {"algorithm": "adaptive"}}]}`,
			`rules[0].by: adaptive may count only by global or route in the Envoy filter, got "consumer"`},
		{"adaptive fallback", `{"cluster": {"name": "d", "on_failure": "local", "rules": [{"name": "a", "limit": {"algorithm": "adaptive"}}]}}`,
			"cluster.rules[0].limit.algorithm: adaptive is not supported in cluster.rules, the fallback while dianad cannot decide"},
		{"adaptive cluster mode", `{"rules": [{"name": "a", "mode": "cluster", "limit": {"algorithm": "adaptive"}}]}`, "rules[0].mode"},
		{"leaky bucket delay", `{"rules": [{"name": "r", "action": "delay", "max_delay": "1s", "limit": {"algorithm": "leaky_bucket", "rate": 1, "period": "1s"}}]}`, "rules[0].action: delay is not supported"},
		{"no rules", `{"rules": []}`, "rules: holds no rule that limits (none, or only unlimited ones) and cluster is not set"},
		{"only unlimited rules", `{"rules": [{"name": "u", "unlimited": true, "match": {"paths": ["/x"]}}]}`, "rules: holds no rule that limits"},
		{"same name twice", `{"rules": [{"name": "r", "limit": {"algorithm": "fixed_window", "limit": 3, "window": "1m"}}],
			"cluster": {"name": "d", "on_failure": "local", "rules": [{"name": "r", "limit": {"algorithm": "fixed_window", "limit": 3, "window": "1m"}}]}}`, `rules[0].name: "r" is also the name of a rule in cluster.rules`},
		{"consumer", rule(`, "by": ["ip", "consumer"]`), "rules[0].by[1]: the consumer needs consumer_header"},
		{"match consumers", rule(`, "match": {"consumers": ["a"]}`), "rules[0].match.consumers: the consumer needs consumer_header"},
		{"exception consumers", rule(`, "match": {"not": [{"paths": ["/x"]}, {"consumers": ["a"]}]}`), "rules[0].match.not[1].consumers: the consumer needs consumer_header"},
		{"fallback consumer", `{"cluster": {"name": "d", "on_failure": "local", "rules": [{"name": "x", "by": ["consumer"], "limit": {"algorithm": "fixed_window", "limit": 3, "window": "1m"}}]}}`, "cluster.rules[0].by[0]: the consumer needs consumer_header"},
		{"fraction runtime key", rule(``)[:len(rule(``))-1] + `, "filter_enabled": {"default_value": {"numerator": 5}, "runtime_key": "x"}}`, "filter_enabled.runtime_key: is not supported: the filter cannot read Envoy's runtime"},
		{"fraction over", rule(``)[:len(rule(``))-1] + `, "filter_enforced": {"default_value": {"numerator": 101, "denominator": "HUNDRED"}}}`, "filter_enforced.default_value.numerator: must be"},
		{"fraction no numerator", rule(``)[:len(rule(``))-1] + `, "filter_enabled": {"default_value": {"denominator": "MILLION"}}}`, "filter_enabled.default_value.numerator: is required"},
		{"fraction no default", rule(``)[:len(rule(``))-1] + `, "filter_enabled": {}}`, "filter_enabled.default_value: is required"},
		{"fraction denominator", rule(``)[:len(rule(``))-1] + `, "filter_enabled": {"default_value": {"numerator": 1, "denominator": "THOUSAND"}}}`, "filter_enabled.default_value.denominator: must be one of HUNDRED, TEN_THOUSAND, MILLION"},
		{"fraction percent", rule(``)[:len(rule(``))-1] + `, "filter_enabled": "50%"}`, "filter_enabled: must be an object"},
		{"hops", `{"rules": [], "xff_trusted_hops": -1}`, "xff_trusted_hops"},
		{"slots", `{"rules": [], "slots": 0}`, "slots"},
		{"ipv6 prefix", `{"rules": [], "ipv6_prefix": 129}`, "ipv6_prefix"},
		{"cluster name", `{"cluster": {}}`, "cluster.name"},
		{"cluster timeout", `{"cluster": {"name": "d", "timeout": "5"}}`, "cluster.timeout"},
		{"cluster path", `{"cluster": {"name": "d", "path": "v1/check"}}`, "cluster.path"},
		{"cluster policy", `{"cluster": {"name": "d", "on_failure": "maybe"}}`, "cluster.on_failure"},
		{"local fallback", `{"cluster": {"name": "d", "on_failure": "local"}}`, "cluster.rules: is required when on_failure is local"},
		{"fallback rule", `{"cluster": {"name": "d", "on_failure": "local", "rules": [{"name": "x"}]}}`, "cluster.rules[0].limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, st := tryStart(t, &vmContext{}, tc.cfg)
			if st != types.OnPluginStartStatusFailed {
				t.Fatalf("plugin started")
			}
			logs := strings.Join(e.GetCriticalLogs(), "\n")
			if !strings.Contains(logs, tc.want) {
				t.Errorf("critical logs %q do not mention %q", logs, tc.want)
			}
		})
	}
}

// adaptiveBy is a config of one adaptive rule counting by the "by" JSON value.
func adaptiveBy(by string) string {
	return `{"rules": [{"name": "a", "by": ` + by + `, "limit": {"algorithm": "adaptive", "slo": "100ms"}}]}`
}

// Adaptive rules count by what configuration bounds: everything, or Envoy's route names; in the
// top-level rules, also beside cluster mode.
func TestAdaptiveConfig(t *testing.T) {
	for _, cfg := range []string{
		`{"rules": [{"name": "a", "limit": {"algorithm": "adaptive"}}]}`,
		adaptiveBy(`[]`), adaptiveBy(`["global"]`), adaptiveBy(`"route"`), adaptiveBy(`["route", "global"]`),
		`{"rules": [{"name": "a", "by": ["route"], "limit": {"algorithm": "adaptive"}}], "cluster": {"name": "d"}}`,
		`{"rules": [{"name": "a", "by": ["route"], "match": {"paths": ["/api/*"]}, "limit": {"algorithm": "adaptive"}},
			{"name": "ip", "by": ["ip"], "limit": {"algorithm": "token_bucket", "rate": 10, "burst": 20}}]}`,
	} {
		if _, err := parseConfig([]byte(cfg)); err != nil {
			t.Errorf("%s: %v", cfg, err)
		}
	}
}

func TestConfigDefaults(t *testing.T) {
	c, err := parseConfig([]byte(`{"cluster": {"name": "dianad", "timeout": "1s", "headers": ["X-Api-Key"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	cl := c.cluster
	if c.slots != 512 || c.slotEntries != 16 || c.casRetries != 8 || c.ipv6Prefix != 64 || c.xffHops != 0 {
		t.Errorf("defaults %+v", c)
	}
	if cl.authority != "dianad" || cl.path != "/v1/check" || cl.timeoutMS != 1000 || cl.onFailure != rules.FailOpen ||
		cl.status != 503 || len(cl.headers) != 1 || cl.headers[0] != "x-api-key" {
		t.Errorf("cluster %+v", cl)
	}
}

// consumer_header names the header an authentication filter sets; route is Envoy's route name.
func TestConsumerAndRoute(t *testing.T) {
	cfg := `{"consumer_header": "X-Consumer", "rules": [
		{"name": "c", "by": ["consumer"], "limit": {"algorithm": "fixed_window", "limit": 1, "window": "1h"}},
		{"name": "r", "by": ["route"], "limit": {"algorithm": "fixed_window", "limit": 2, "window": "1h"}}]}`
	for _, rn := range runners {
		t.Run(rn.name, func(t *testing.T) {
			e := start(t, rn.vm(t), cfg)
			if err := e.SetProperty([]string{"xds", "route_name"}, []byte("orders")); err != nil {
				t.Fatal(err)
			}
			if r := e.request("/", "x-consumer", "alice"); r.status != 0 {
				t.Fatalf("alice's first request: %d", r.status)
			}
			if r := e.request("/", "x-consumer", "alice"); r.status != 429 {
				t.Errorf("alice's second request: %d, want 429 by consumer", r.status)
			}
			if r := e.request("/", "x-consumer", "bob"); r.status != 0 {
				t.Errorf("bob's first request: %d", r.status)
			}
			if r := e.request("/", "x-consumer", "carol"); r.status != 429 {
				t.Errorf("the route's third request: %d, want 429 by route", r.status)
			}
			if err := e.SetProperty([]string{"xds", "route_name"}, []byte("users")); err != nil {
				t.Fatal(err)
			}
			if r := e.request("/", "x-consumer", "dave"); r.status != 0 {
				t.Errorf("another route: %d", r.status)
			}
		})
	}
}
