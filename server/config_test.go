package server

import (
	"strings"
	"testing"

	"github.com/diana-gw/diana/config"
)

func TestDecodeErrors(t *testing.T) {
	tests := []struct {
		name   string
		doc    string
		remote bool
		want   string
	}{
		{"nothing served", "version: 1\nlisten: \"\"\nadmin: {listen: \"\"}\n", false,
			"cfg.yaml: listen: cannot be empty when admin.listen is empty too"},
		{"remote holds server settings", "version: 1\nlisten: \":1\"\nrules: []\n", true,
			"cfg.yaml: listen: unknown field"},
		{"remote redis key without redis", "version: 1\nremote: {redis_key: k}\n", false,
			"cfg.yaml: remote.redis_key: needs the redis section"},
		{"bad upstream url", "version: 1\nupstreams: [{name: a, url: \"ftp://x\"}]\n", false,
			"cfg.yaml: upstreams[0].url: scheme must be http, https or demo"},
		{"newer version", "version: 2\n", false, "cfg.yaml: version:"},
	}
	for _, tt := range tests {
		doc, err := config.Decode([]byte(tt.doc), "cfg.yaml")
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		_, err = Decode(doc, "cfg.yaml", tt.remote)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %v, want it to contain %q", tt.name, err, tt.want)
		}
	}
}
