package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"gopkg.in/yaml.v3"
)

const examplesFile = "../examples/kong.yml"

// dianaConfigs returns the config of every diana plugin in a kong.yml: global, under services,
// routes and consumers.
func dianaConfigs(t *testing.T, doc map[string]any) map[string]map[string]any {
	out := map[string]map[string]any{}
	var walk func(where string, v any)
	walk = func(where string, v any) {
		switch v := v.(type) {
		case map[string]any:
			if v["name"] == "diana" {
				cfg, _ := v["config"].(map[string]any)
				if cfg == nil {
					cfg = map[string]any{}
				}
				out[where] = cfg
			}
			for k, c := range v {
				n := k
				if name, ok := v["name"].(string); ok {
					n = name + "." + k
				}
				walk(where+"/"+n, c)
			}
		case []any:
			for _, c := range v {
				walk(where, c)
			}
		}
	}
	walk("", doc)
	return out
}

// Every diana config in examples/kong.yml passes the plugin's own validation (strict: no
// unknown keys), and deck accepts the file.
func TestExamplesKongYML(t *testing.T) {
	b, err := os.ReadFile(examplesFile)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if doc["_format_version"] != "3.0" {
		t.Fatalf("_format_version %v, want \"3.0\"", doc["_format_version"])
	}
	cfgs := dianaConfigs(t, doc)
	if len(cfgs) < 4 {
		t.Fatalf("found %d diana configs, want at least 4", len(cfgs))
	}
	for where, cfg := range cfgs {
		j, err := json.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := parse(j, true); err != nil {
			t.Errorf("%s: %v", where, err)
		}
	}

	abs, _ := filepath.Abs(examplesFile)
	out, err := exec.Command("deck", "validate", "-s", abs).CombinedOutput()
	if err != nil {
		t.Fatalf("deck validate (Debian package deck): %v\n%s", err, out)
	}
}
