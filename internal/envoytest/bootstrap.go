// Package envoytest reads Envoy configs in tests with Envoy's own generated types
// (go-control-plane), so that an example is checked as Envoy would read it.
package envoytest

import (
	"encoding/json"
	"os"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"gopkg.in/yaml.v3"
)

// Bootstrap reads the YAML bootstrap at path and validates it (ValidateAll, which does not look
// inside typed configs: the caller unpacks and validates those). The packages of the typed
// configs it holds must be linked in by the caller (blank imports) for it to parse.
func Bootstrap(t testing.TB, path string) *bootstrapv3.Bootstrap {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	js, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	var b bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(js, &b); err != nil {
		t.Fatalf("%s: bootstrap: %v", path, err)
	}
	if err := b.ValidateAll(); err != nil {
		t.Fatalf("%s: bootstrap: %v", path, err)
	}
	return &b
}
