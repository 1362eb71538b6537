package server

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
)

// Every metric the Grafana dashboard queries is one dianad exports (declared in metrics.go), and
// the dashboard uses each of them.
func TestGrafanaDashboard(t *testing.T) {
	b, err := os.ReadFile("../deploy/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("deploy/grafana-dashboard.json: %v", err)
	}
	src, err := os.ReadFile("metrics.go")
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	for _, m := range regexp.MustCompile(`Name:\s+"(diana_[a-z_]+)"`).FindAllSubmatch(src, -1) {
		exported[string(m[1])] = true
	}
	if len(exported) < 8 {
		t.Fatalf("found %d metric names in metrics.go: %v", len(exported), exported)
	}
	used := map[string]bool{}
	name := regexp.MustCompile(`diana_[a-z_]+`)
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			for _, m := range name.FindAllString(tg.Expr, -1) {
				base := m
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if b := strings.TrimSuffix(m, suffix); b != m && exported[b] {
						base = b
					}
				}
				if !exported[base] {
					t.Errorf("panel %q queries %s, which dianad does not export", p.Title, m)
				}
				used[base] = true
			}
		}
	}
	for m := range exported {
		if !used[m] && m != "diana_config_info" {
			t.Errorf("the dashboard shows nothing of %s", m)
		}
	}
}

// The docker-compose example's config is valid.
func TestComposeConfig(t *testing.T) {
	t.Setenv("DIANA_ADMIN_TOKEN", "change-me") // as docker-compose.yml sets it
	b, err := os.ReadFile("../deploy/diana.compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Parse(b, "deploy/diana.compose.yaml"); err != nil {
		t.Fatal(err)
	}
}
