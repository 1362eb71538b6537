// Package schema holds the JSON Schemas (draft 2020-12) of Diana's config documents. They are
// the reference that the Kong plugin's schema and the configuration docs derive from, and
// editors can validate configs with them; the decoders in shared/rules and server remain what
// dianad and the plugins run, and the tests of this package check that both accept and reject
// the same documents.
//
//   - rule.schema.json: one rule (name, match, by, cost, limit, mode, action, reply, ...);
//   - limit.schema.json: a rule's limit, an algorithm and its parameters, generated from the
//     algorithms' registry in shared/rules (make generate);
//   - dianad.schema.json: the dianad document (version, listen, admin, upstreams, redis,
//     remote, rules);
//   - rules.schema.json: a remote document, which holds only version and rules.
//
// The schemas reference each other by relative URLs ("rule.schema.json#/$defs/match"), resolved
// against their $id, which all share the base BaseURL.
package schema

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
