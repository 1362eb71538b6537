// Package schema holds the JSON Schemas (draft 2020-12) of Diana's config documents, for
// editors that validate configs, the Kong plugin's field table and the configuration docs.
// Every one is generated, by internal/gen (go generate ./schema, or make generate; a stale file
// fails that program's test):
//
//   - rule.schema.json: one rule (name, match, by, cost, limit, mode, action, reply, ...), from
//     shared/rules' reader (rules.ReadSpec) and src/rule.json;
//   - limit.schema.json: a rule's limit, an algorithm and its parameters, from the algorithms'
//     registry in shared/rules;
//   - dianad.schema.json: the dianad document (version, listen, admin, upstreams, redis,
//     remote, rules), from server's reader (server.DecodeObj) and src/dianad.json;
//   - rules.schema.json: a remote document, which holds only version and rules, from the same
//     reader and src/rules.json.
//
// A reader states each field's type, default, bounds and enum as it reads it; conf.Describe
// records those calls. The files in src hold the rest: prose, the forms of strings (patterns),
// and the rules that tie one field to another. Two markers there are the generator's own:
// "x-required": "conditional" on a field the reader requires only when another field says so
// (an allOf of the source states when), and "x-default" on a field whose default the reader
// cannot state: "computed" (another field's value, as its description says) or "absent" (the
// field not given, which no value of its type says).
//
// The schemas reference each other by relative URLs ("rule.schema.json#/$defs/match"), resolved
// against their $id, which all share the base BaseURL.
package schema

//go:generate go run ./internal/gen

import (
	"embed"
	"io/fs"
)

// BaseURL is the common base of the schemas' $id: a schema's $id is BaseURL followed by its
// file name.
const BaseURL = "https://raw.githubusercontent.com/diana-gw/diana/main/schema/"

// The names of the schema files in FS.
const (
	RuleFile   = "rule.schema.json"   // one rule
	LimitFile  = "limit.schema.json"  // a rule's limit: generated from shared/rules
	DianadFile = "dianad.schema.json" // the dianad document
	RulesFile  = "rules.schema.json"  // a remote document: version and rules
)

//go:embed *.schema.json
var files embed.FS

// FS returns the schema files, named RuleFile, DianadFile and RulesFile, as a read-only file
// system; read one with fs.ReadFile(schema.FS(), schema.RuleFile).
func FS() fs.FS { return files }
