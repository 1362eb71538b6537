package main

import (
	"strings"
	"testing"

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

func TestConfigDefaults(t *testing.T) {
	c, err := parseConfig([]byte(`{"cluster": {"name": "dianad", "timeout": "1s", "headers": ["X-Api-Key"]}}`))
	if err != nil {
		t.Fatal(err)
	}
	cl := c.cluster
	if c.slots != 512 || c.slotEntries != 16 || c.casRetries != 8 || c.ipv6Prefix != 64 || c.xffHops != 0 {
		t.Errorf("defaults %+v", c)
	}
	if cl.authority != "dianad" || cl.path != "/v1/check" || cl.timeoutMS != 1000 || cl.onFailure != failOpen ||
		cl.status != 503 || len(cl.headers) != 1 || cl.headers[0] != "x-api-key" {
		t.Errorf("cluster %+v", cl)
	}
}
