package main

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/diana-gw/diana/shared/rules"
)

// kongTypes are the field types of Kong's metaschema (kong/db/schema/metaschema.lua).
var kongTypes = map[string]bool{"string": true, "integer": true, "number": true, "boolean": true,
	"array": true, "set": true, "map": true, "record": true, "foreign": true, "function": true, "json": true}

// optional are the fields without a default: absent means "not used".
var optional = map[string]bool{"header_name": true, "path": true, "redis_sentinel_master": true,
	"redis_username": true, "redis_password": true, "redis_server_name": true, "redis_ssl_ca_file": true,
	"redis_ssl_cert_file": true, "redis_ssl_key_file": true, "usage_header": true, "usage_fallback": true}

// TestDump checks the -dump output against Kong's metaschema rules and Konga's rendering rules
// (shared/notes/kong.md): the envelope, flat scalar fields in one config record, a known type
// for each, one_of on enums, between on integers, defaults everywhere (and valid), descriptions
// of 10 to 500 characters, arrays only of strings, no map, no record inside the config, no
// field hidden by a leading underscore, and entity checks on existing fields.
func TestDump(t *testing.T) {
	b, err := dumpInfo("/usr/local/kong/diana.socket")
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Protocol string
		Plugins  []struct {
			Name     string
			Version  string
			Priority int
			Phases   []string
			Schema   struct {
				Name         string
				Fields       []map[string]map[string]any
				EntityChecks []map[string]map[string]any `json:"entity_checks"`
			}
		}
	}
	if err := json.Unmarshal(b, &info); err != nil {
		t.Fatal(err)
	}
	if info.Protocol != "ProtoBuf:1" || len(info.Plugins) != 1 {
		t.Fatalf("envelope %+v", info)
	}
	p := info.Plugins[0]
	if p.Name != "diana" || p.Schema.Name != "diana" || p.Version == "" || p.Priority >= 950 || p.Priority < 910 {
		t.Fatalf("plugin %s %s priority %d: want diana, below auth (1000), ip-restriction (990) and acl (950), at rate-limiting's (910)", p.Name, p.Version, p.Priority)
	}
	if !reflect.DeepEqual(p.Phases, []string{"access", "log"}) {
		t.Fatalf("phases %v", p.Phases)
	}
	// config, and protocols as Kong's typedefs.protocols_http (without it Kong Manager's form
	// saves protocols [] and Kong never runs the plugin: TestKongManagerForm).
	if len(p.Schema.Fields) != 2 || p.Schema.Fields[0]["config"] == nil ||
		!reflect.DeepEqual(p.Schema.Fields[1]["protocols"], map[string]any{"type": "set", "required": true,
			"default": []any{"grpc", "grpcs", "http", "https"}, "description": "A set of strings representing HTTP protocols.",
			"elements": map[string]any{"type": "string", "one_of": []any{"grpc", "grpcs", "http", "https"}}}) {
		t.Fatalf("schema fields %v, want config and Kong's protocols_http", p.Schema.Fields)
	}
	cfg := p.Schema.Fields[0]["config"]
	if cfg["type"] != "record" {
		t.Fatalf("config type %v", cfg["type"])
	}
	fields := map[string]map[string]any{}
	defaults := map[string]any{}
	advanced := map[string]bool{}
	for _, f := range fieldTable() {
		advanced[f.Name] = f.Advanced
	}
	for _, raw := range cfg["fields"].([]any) {
		m := raw.(map[string]any)
		if len(m) != 1 {
			t.Fatalf("a field must be a map of one key: %v", m)
		}
		for name, v := range m {
			f := v.(map[string]any)
			fields[name] = f
			typ, _ := f["type"].(string)
			switch {
			case !kongTypes[typ]:
				t.Errorf("%s: unknown type %q", name, typ)
			case typ == "map" || typ == "record" || typ == "json" || typ == "function" || typ == "foreign":
				t.Errorf("%s: type %s cannot be edited in Konga", name, typ)
			case typ == "array":
				if el, _ := f["elements"].(map[string]any); el == nil || el["type"] != "string" && el["type"] != "integer" {
					t.Errorf("%s: arrays must be of strings or integers, got %v", name, f["elements"])
				}
			}
			if strings.HasPrefix(name, "_") {
				t.Errorf("%s: Konga hides fields starting with _", name)
			}
			// Kong Manager's main section holds the required fields: the limits, not the
			// connection to Redis, the batching or the replies.
			for _, p := range []string{"redis_", "batch_", "fail_", "fallback_", "error_"} {
				if strings.HasPrefix(name, p) && f["required"] == true {
					t.Errorf("%s: required, so Kong Manager shows it among the limits; make it Advanced", name)
				}
			}
			d, _ := f["description"].(string)
			if len(d) < 10 || len(d) > 500 {
				t.Errorf("%s: description of %d characters, want 10 to 500", name, len(d))
			}
			def, has := f["default"]
			if !has && !optional[name] {
				t.Errorf("%s: no default", name)
			}
			if has {
				defaults[name] = def
				if f["required"] != !advanced[name] {
					t.Errorf("%s: has a default, so it is required unless Advanced (then optional: Kong fills its default)", name)
				}
			}
			if typ == "boolean" && def != false {
				t.Errorf("%s: a boolean must default to false (Konga cannot create false)", name)
			}
			if oneOf, ok := f["one_of"].([]any); ok {
				if typ != "string" {
					t.Errorf("%s: one_of on a %s", name, typ)
				}
				found := false
				for _, v := range oneOf {
					found = found || v == def
				}
				if !found {
					t.Errorf("%s: default %v not in one_of %v", name, def, oneOf)
				}
			}
			if btw, ok := f["between"].([]any); ok {
				lo, hi := btw[0].(float64), btw[1].(float64)
				if typ != "integer" || len(btw) != 2 || lo > hi {
					t.Errorf("%s: bad between %v on %s", name, btw, typ)
				} else if n, ok := def.(float64); ok && (n < lo || n > hi) {
					t.Errorf("%s: default %v outside between %v", name, def, btw)
				}
			} else if typ == "integer" {
				t.Errorf("%s: integer without between", name)
			}
		}
	}
	for _, ec := range p.Schema.EntityChecks {
		c := ec["conditional"]
		if c == nil {
			t.Fatalf("entity check %v", ec)
		}
		for _, k := range []string{"if_field", "then_field"} {
			name, _ := c[k].(string)
			if fields[strings.TrimPrefix(name, "config.")] == nil || !strings.HasPrefix(name, "config.") {
				t.Errorf("entity check %s names %q, not a config field", k, name)
			}
		}
	}

	// Derived from the algorithms' registry, not restated.
	if !reflect.DeepEqual(toStrings(fields["algorithm"]["one_of"]), rules.Algorithms()) {
		t.Errorf("algorithm one_of %v, registered algorithms %v", fields["algorithm"]["one_of"], rules.Algorithms())
	}
	if got := fields["error_code"]; got["default"] != 429.0 || !reflect.DeepEqual(got["between"], []any{400.0, 599.0}) {
		t.Errorf("error_code %v, want the rule schema's reply.status", got)
	}
	if fields["error_message"]["default"] != "API rate limit exceeded" {
		t.Errorf("error_message default %v", fields["error_message"]["default"])
	}

	// The defaults, as Kong sends them, make a valid config; so does a config of only them.
	db, _ := json.Marshal(defaults)
	if _, err := parse(db, true); err != nil {
		t.Fatalf("the defaults are not a valid config: %v", err)
	}
	// Every field the decoder reads is in the schema, and no other: a config naming every
	// schema field passes strict decoding, and the decoder rejects what the schema lacks.
	for name := range fields {
		if _, err := parse([]byte(`{"`+name+`": null}`), true); err != nil {
			t.Errorf("field %s is in the schema but the decoder rejects it: %v", name, err)
		}
	}
}

func toStrings(v any) []string {
	var out []string
	for _, s := range v.([]any) {
		out = append(out, s.(string))
	}
	return out
}

func TestResolveFields(t *testing.T) {
	if _, err := resolved(); err != nil {
		t.Fatalf("the field table contradicts rule.schema.json: %v", err)
	}
}

// docs/kong.md names every field of the schema, and only those: the table there is written by
// hand, so this ties it to the field table.
func TestDocsNameEveryField(t *testing.T) {
	b, err := os.ReadFile("../docs/kong.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, f := range resolvedFields() {
		if !strings.Contains(doc, "`"+f.Name+"`") {
			t.Errorf("docs/kong.md does not name the field %s", f.Name)
		}
	}
}
