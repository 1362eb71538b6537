package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"strings"
	"sync"

	"github.com/diana-gw/diana/schema"
	"github.com/diana-gw/diana/shared/rules"
)

// Version and Priority are what Kong is told about the plugin. The priority is Kong's own
// rate-limiting's (910): after the authentication plugins (1000 to 1450), so the consumer is
// known, and after ip-restriction (990) and acl (950), so a request they refuse spends no
// client's limit.
const (
	Version  = "0.1.0"
	Priority = 910
)

// logPhase says whether the plugin takes Kong's log phase, which gives concurrency leases back
// when a request ends. Kong sends the log event for every request of every instance once the
// plugin declares it (phases are the plugin's, not an instance's): an event without a PDK call,
// after the response, but a round trip of CPU on the node. A plugin server started with
// -no-log-phase (for start_cmd and query_cmd alike) declares access alone, and its schema and
// decode refuse the algorithms that hold leases.
var logPhase = true

// phases returns the events Kong sends: access decides; log gives back concurrency leases.
func phases() []string {
	if logPhase {
		return []string{"access", "log"}
	}
	return []string{"access"}
}

// leasing reports whether algorithm holds a lease per request in flight (needs the log phase).
func leasing(algorithm string) bool {
	k, ok := rules.Algorithm(algorithm)
	return ok && k.Leases
}

// schemaFile returns one of schema's files decoded, numbers kept exact.
func schemaFile(name string) (map[string]any, error) {
	b, err := fs.ReadFile(schema.FS(), name)
	if err != nil {
		return nil, err
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return m, nil
}

// lookup returns the node at ref, "FILE#/pointer" or "#/pointer" in file, following $refs, with
// the properties of the pointed node winning over those of its $ref.
func lookup(file, ref string) (map[string]any, error) {
	if f, ptr, ok := strings.Cut(ref, "#"); ok && f != "" {
		file, ref = f, "#"+ptr
	}
	root, err := schemaFile(file)
	if err != nil {
		return nil, err
	}
	var cur any = root
	ptr := strings.TrimPrefix(ref, "#")
	for _, p := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
		if p == "" {
			continue
		}
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s: %q is not inside an object", ref, p)
		}
		if cur, ok = m[p]; !ok {
			return nil, fmt.Errorf("%s%s: no %q", file, ref, p)
		}
	}
	m, ok := cur.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%s%s: not an object", file, ref)
	}
	out := map[string]any{}
	if r, ok := m["$ref"].(string); ok {
		n, err := lookup(file, r)
		if err != nil {
			return nil, err
		}
		for k, v := range n {
			out[k] = v
		}
	}
	for k, v := range m {
		out[k] = v
	}
	return out, nil
}

// resolveFields fills in the fields of the table from the rule schemas: type, enum, bounds and
// default where the table leaves them to it. It fails if the table contradicts the schema.
func resolveFields() ([]field, error) {
	fs := fieldTable()
	for i := range fs {
		f := &fs[i]
		if f.From == "" {
			continue
		}
		n, err := lookup(schema.RuleFile, f.From)
		if err != nil {
			return nil, fmt.Errorf("field %s: %w", f.Name, err)
		}
		if t, _ := n["type"].(string); t != f.Type {
			return nil, fmt.Errorf("field %s is a %s but %s is a %s", f.Name, f.Type, f.From, t)
		}
		if e, ok := n["enum"].([]any); ok && f.OneOf == nil {
			for _, v := range e {
				if f.Name == "algorithm" && !logPhase && leasing(v.(string)) {
					continue // its leases would never come back
				}
				f.OneOf = append(f.OneOf, v.(string))
			}
		}
		if f.Min == nil {
			f.Min = number(n["minimum"])
		}
		if f.Max == nil {
			f.Max = number(n["maximum"])
		}
		if f.Default == nil {
			switch v := n["default"].(type) {
			case json.Number:
				f.Default = *number(v)
			case string, bool:
				f.Default = v
			}
		}
		if f.Desc == "" {
			f.Desc, _ = n["description"].(string)
		}
	}
	return fs, nil
}

func number(v any) *int64 {
	n, ok := v.(json.Number)
	if !ok {
		return nil
	}
	i, err := n.Int64()
	if err != nil {
		return nil
	}
	return &i
}

var resolved = sync.OnceValues(resolveFields)

// resolvedFields returns the resolved field table. The rule schema is embedded, so an error is
// a build mistake that the tests catch; the table as written is used then.
func resolvedFields() []field {
	fs, err := resolved()
	if err != nil {
		return fieldTable()
	}
	return fs
}

// kongField is a field in Kong's schema language.
func kongField(f field) map[string]any {
	m := map[string]any{"type": f.Type, "description": f.Desc}
	if f.Default != nil {
		m["default"] = f.Default
	}
	m["required"] = f.Default != nil && !f.Advanced
	if f.OneOf != nil {
		m["one_of"] = f.OneOf
	}
	if f.Min != nil && f.Max != nil {
		m["between"] = []int64{*f.Min, *f.Max}
	}
	if f.Encrypted {
		m["encrypted"] = true
	}
	if f.Referenceable {
		m["referenceable"] = true
	}
	str := m
	if f.Type == "array" {
		str = map[string]any{"type": "string"}
		m["elements"] = str
	}
	if f.Empty {
		str["len_min"] = 0
	}
	if f.Match != nil {
		str["match_any"] = map[string]any{"patterns": f.Match.Patterns, "err": f.Match.Err}
	}
	if f.None != nil {
		var none []any
		for _, n := range f.None {
			none = append(none, map[string]any{"pattern": n.Pattern, "err": n.Err})
		}
		str["match_none"] = none
	}
	return map[string]any{f.Name: m}
}

// kongCheck is an entity check in Kong's schema language.
func kongCheck(c check) map[string]any {
	ifMatch := map[string]any{"one_of": c.If.OneOf}
	if len(c.If.OneOf) == 1 {
		ifMatch = map[string]any{"eq": c.If.OneOf[0]}
	}
	then := map[string]any{}
	if c.Required {
		then["required"] = true
	}
	if c.Eq != nil {
		then["eq"] = c.Eq
	}
	if c.Between != nil {
		then["between"] = c.Between[:]
	}
	return map[string]any{"conditional": map[string]any{
		"if_field": "config." + c.If.Field, "if_match": ifMatch,
		"then_field": "config." + c.Then, "then_match": then,
	}}
}

// httpProtocols are the protocols of Kong's http subsystem, the only ones whose requests reach
// the access phase (kong/constants.lua PROTOCOLS_WITH_SUBSYSTEM, sorted as Kong's typedefs sort
// them).
var httpProtocols = []string{"grpc", "grpcs", "http", "https"}

// protocolsHTTP is the plugin's protocols field, Kong's typedefs.protocols_http as the bundled
// rate-limiting declares it. Without it Kong falls back to the plugins entity's protocols (every
// protocol, stream ones included), and Kong Manager's form, which takes the field's default
// and choices from this schema, prefills nothing: saved untouched, the plugin gets protocols []
// and Kong never runs it (plugins_iterator's should_process_plugin).
func protocolsHTTP() map[string]any {
	return map[string]any{"type": "set", "required": true, "default": httpProtocols,
		"elements":    map[string]any{"type": "string", "one_of": httpProtocols},
		"description": "A set of strings representing HTTP protocols."}
}

// pluginSchema is the plugin's schema as Kong's metaschema reads it.
func pluginSchema() (map[string]any, error) {
	fs, err := resolved()
	if err != nil {
		return nil, err
	}
	var cfg, ecs []any
	for _, f := range fs {
		cfg = append(cfg, kongField(f))
	}
	for _, c := range checks(fs) {
		ecs = append(ecs, kongCheck(c))
	}
	return map[string]any{
		"name": "diana",
		"fields": []any{
			map[string]any{"config": map[string]any{"type": "record", "required": true, "fields": cfg}},
			map[string]any{"protocols": protocolsHTTP()},
		},
		"entity_checks": ecs,
	}, nil
}

// dumpInfo returns the plugin-info JSON Kong's query_cmd reads, in go-pdk's envelope.
func dumpInfo(socketPath string) ([]byte, error) {
	s, err := pluginSchema()
	if err != nil {
		return nil, err
	}
	info := map[string]any{
		"Protocol":   "ProtoBuf:1",
		"SocketPath": socketPath,
		"Plugins": []any{map[string]any{
			"Name": "diana", "Version": Version, "Priority": Priority, "Phases": phases(), "Schema": s,
		}},
	}
	b, err := json.MarshalIndent(info, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}
