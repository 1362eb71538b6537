// Package config turns config documents from a local file and a remote source (an HTTP URL or a
// Redis key) into validated configs, and keeps the effective one: the remote's while it is
// reachable and valid, else the file's.
//
// The package is generic over the parsed type: it decodes JSON or YAML into a conf.Value tree
// and hands it to a Parse function that validates it.
package config

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"path"
	"strconv"
	"strings"

	"github.com/diana-gw/diana/shared/conf"
	"github.com/diana-gw/diana/shared/jsontok"
	"gopkg.in/yaml.v3"
)

// Decode parses one config document into a conf.Value tree. name identifies the document in
// errors ("NAME: line L: reason") and chooses the syntax by its extension: ".json" is JSON,
// ".yaml" and ".yml" are YAML; for any other name (a query or fragment after "?" or "#" is
// ignored), a document whose first non-space byte is '{' is JSON and anything else is YAML.
//
// A document that holds only whitespace (or, in YAML, only comments) is an error,
// "NAME: empty document".
//
// JSON is parsed by conf.ParseJSON; its errors wrap a *conf.SyntaxError.
//
// YAML is read as YAML 1.2 by gopkg.in/yaml.v3 and converted as follows:
//   - mappings become *conf.Object in document order; keys must be scalars, whose text is the
//     key, and a duplicate key is an error that names the key and both lines;
//   - sequences become []conf.Value; null becomes nil; true and false become bool; strings,
//     quoted scalars and unquoted timestamps become string (the text as written);
//   - numbers become conf.Number, and only in the JSON form -?(0|[1-9][0-9]*)(.[0-9]+)?(e[+-]?[0-9]+)?:
//     forms only YAML has (0x1F, 0o17, 010, 1_000, +1, .5, .inf, .nan) are errors that say
//     which value YAML reads, so that no number means something other than it seems;
//   - aliases are expanded; an alias inside its own anchor is an error, and so is a document
//     whose aliases add more than MaxAliasValues values, or more than MaxAliasText bytes of
//     keys and strings, to the ones written (a "billion laughs" bomb, or one string repeated:
//     the bounds are absolute, so that what a document costs, here and in whatever reads,
//     quotes or compiles its values, follows its size);
//   - merge keys ("<<: *base" or "<<: [*a, *b]") copy the keys of the merged mappings that
//     the mapping does not set itself, at the place of "<<"; with several, the first wins;
//   - any other tag (!!binary, !custom) is an error, and so is a second document ("---").
func Decode(data []byte, name string) (conf.Value, error) {
	if len(bytes.TrimLeft(data, " \t\r\n")) == 0 {
		return nil, fmt.Errorf("%s: empty document", name)
	}
	if isJSON(data, name) {
		v, err := conf.ParseJSON(data)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		return v, nil
	}
	return decodeYAML(data, name)
}

// isJSON chooses the syntax of a document named name.
func isJSON(data []byte, name string) bool {
	n := name
	if i := strings.IndexAny(n, "?#"); i >= 0 {
		n = n[:i]
	}
	switch strings.ToLower(path.Ext(n)) {
	case ".json":
		return true
	case ".yaml", ".yml":
		return false
	}
	rest := bytes.TrimLeft(data, " \t\r\n")
	return len(rest) > 0 && rest[0] == '{'
}

func decodeYAML(data []byte, name string) (v conf.Value, err error) {
	// yaml.v3 turns its own failures into errors but re-panics anything else; a parser bug must
	// not take the process down on a reload.
	defer func() {
		if r := recover(); r != nil {
			v, err = nil, fmt.Errorf("%s: YAML parser failed: %v", name, r)
		}
	}()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if err == io.EOF {
			return nil, fmt.Errorf("%s: empty document", name)
		}
		return nil, yamlError(name, err)
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case err == nil:
		return nil, fmt.Errorf("%s: line %d: a second document starts here (a config file holds one document)", name, next.Line)
	case err != io.EOF:
		return nil, yamlError(name, err)
	}
	if len(doc.Content) == 0 {
		return nil, fmt.Errorf("%s: empty document", name)
	}
	root := doc.Content[0]
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" && root.Value == "" && root.Style == 0 {
		// "---" alone, or a directive and nothing else.
		return nil, fmt.Errorf("%s: empty document", name)
	}
	values, text := countNodes(root)
	c := &yamlConv{name: name, active: map[*yaml.Node]bool{},
		budget: values + MaxAliasValues, limit: values + MaxAliasValues,
		text: text + MaxAliasText, textLimit: text + MaxAliasText}
	return c.value(root)
}

// MaxAliasValues is the most values YAML aliases may add to a document: templates repeated a
// few hundred times fit, and a decoded document stays within about 100 bytes per value written
// plus 10 MB, whatever its aliases.
const MaxAliasValues = 100_000

// MaxAliasText is the most bytes of keys and strings YAML aliases may add to a document. The
// values are shared, not copied, but a reader may copy each one (an error quotes it, a pattern
// compiles it): one 1 MB string aliased a few thousand times must not become gigabytes there.
const MaxAliasText = 1 << 20

// yamlError rewrites yaml.v3's "yaml: line L: reason" as "NAME: line L: reason".
func yamlError(name string, err error) error {
	return fmt.Errorf("%s: %s", name, strings.TrimPrefix(err.Error(), "yaml: "))
}

// countNodes counts the nodes written in the document, an alias counting as one, and the bytes
// of their scalars (keys and values), an alias counting as none.
func countNodes(n *yaml.Node) (nodes, text int) {
	if n.Kind == yaml.AliasNode {
		return 1, 0
	}
	nodes, text = 1, len(n.Value)
	if n.Kind != yaml.ScalarNode {
		text = 0 // the anchor's name, or a tag, not a value
	}
	for _, ch := range n.Content {
		cn, ct := countNodes(ch)
		nodes, text = nodes+cn, text+ct
	}
	return nodes, text
}

// yamlConv converts a yaml.Node tree into a conf.Value tree.
type yamlConv struct {
	name      string
	budget    int                 // values that may still be produced; aliases spend it too
	limit     int                 // the initial budget, for the error
	text      int                 // bytes of keys and strings that may still be produced
	textLimit int                 // the initial text budget, for the error
	active    map[*yaml.Node]bool // anchored nodes being expanded through an alias, to refuse cycles
}

// spendText charges the bytes of a key or a scalar produced at line.
func (c *yamlConv) spendText(line, n int) error {
	c.text -= n
	if c.text < 0 {
		return c.errorf(line, "aliases expand the document to more than %d bytes of keys and strings (its own and %d more)", c.textLimit, MaxAliasText)
	}
	return nil
}

func (c *yamlConv) errorf(line int, format string, args ...any) error {
	return fmt.Errorf("%s: line %d: %s", c.name, line, fmt.Sprintf(format, args...))
}

func (c *yamlConv) value(n *yaml.Node) (conf.Value, error) {
	c.budget--
	if c.budget < 0 {
		return nil, c.errorf(n.Line, "aliases expand the document to more than %d values (its own and %d more)", c.limit, MaxAliasValues)
	}
	switch n.Kind {
	case yaml.AliasNode:
		if c.active[n.Alias] {
			return nil, c.errorf(n.Line, "alias *%s is used inside its own anchor", n.Value)
		}
		c.active[n.Alias] = true
		v, err := c.value(n.Alias)
		delete(c.active, n.Alias)
		return v, err
	case yaml.MappingNode:
		if tag := n.ShortTag(); tag != "!!map" {
			return nil, c.errorf(n.Line, "unsupported tag %s on a mapping", tag)
		}
		return c.mapping(n)
	case yaml.SequenceNode:
		if tag := n.ShortTag(); tag != "!!seq" {
			return nil, c.errorf(n.Line, "unsupported tag %s on a sequence", tag)
		}
		list := make([]conf.Value, 0, len(n.Content))
		for _, item := range n.Content {
			v, err := c.value(item)
			if err != nil {
				return nil, err
			}
			list = append(list, v)
		}
		return list, nil
	case yaml.ScalarNode:
		if err := c.spendText(n.Line, len(n.Value)); err != nil {
			return nil, err
		}
		return c.scalar(n)
	}
	return nil, c.errorf(n.Line, "unexpected YAML node kind %d", n.Kind)
}

func (c *yamlConv) mapping(n *yaml.Node) (conf.Value, error) {
	// First pass: the keys written in this mapping, which win over merged ones.
	explicit := make(map[string]int, len(n.Content)/2) // key → line
	mergeLine := 0
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if k.Kind == yaml.AliasNode {
			k = k.Alias
		}
		if k.Kind != yaml.ScalarNode {
			return nil, c.errorf(n.Content[i].Line, "a mapping key must be a scalar, not a %s", kindName(k.Kind))
		}
		if k.ShortTag() == "!!merge" {
			if mergeLine != 0 {
				return nil, c.errorf(n.Content[i].Line, "duplicate key << (first at line %d)", mergeLine)
			}
			mergeLine = n.Content[i].Line
			continue
		}
		if first, dup := explicit[k.Value]; dup {
			return nil, c.errorf(n.Content[i].Line, "duplicate key %q (first at line %d)", k.Value, first)
		}
		explicit[k.Value] = n.Content[i].Line
	}

	obj := &conf.Object{Keys: make([]string, 0, len(n.Content)/2), Vals: make([]conf.Value, 0, len(n.Content)/2)}
	var merged map[string]bool
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.AliasNode {
			k = k.Alias
		}
		if k.ShortTag() != "!!merge" {
			if err := c.spendText(n.Content[i].Line, len(k.Value)); err != nil {
				return nil, err
			}
			v, err := c.value(val)
			if err != nil {
				return nil, err
			}
			obj.Keys = append(obj.Keys, k.Value)
			obj.Vals = append(obj.Vals, v)
			continue
		}
		srcs, err := c.mergeSources(val)
		if err != nil {
			return nil, err
		}
		merged = make(map[string]bool)
		for _, src := range srcs {
			for j, key := range src.Keys {
				if _, ok := explicit[key]; ok || merged[key] {
					continue
				}
				merged[key] = true
				obj.Keys = append(obj.Keys, key)
				obj.Vals = append(obj.Vals, src.Vals[j])
			}
		}
	}
	return obj, nil
}

// mergeSources converts the value of a "<<" key: a mapping or a sequence of mappings, usually
// written as aliases.
func (c *yamlConv) mergeSources(n *yaml.Node) ([]*conf.Object, error) {
	v, err := c.value(n)
	if err != nil {
		return nil, err
	}
	switch v := v.(type) {
	case *conf.Object:
		return []*conf.Object{v}, nil
	case []conf.Value:
		srcs := make([]*conf.Object, 0, len(v))
		for _, item := range v {
			o, ok := item.(*conf.Object)
			if !ok {
				return nil, c.errorf(n.Line, "<< takes a mapping or a list of mappings, and this list holds something else")
			}
			srcs = append(srcs, o)
		}
		return srcs, nil
	}
	return nil, c.errorf(n.Line, "<< takes a mapping or a list of mappings")
}

func (c *yamlConv) scalar(n *yaml.Node) (conf.Value, error) {
	switch tag := n.ShortTag(); tag {
	case "!!null":
		return nil, nil
	case "!!bool":
		switch strings.ToLower(n.Value) {
		case "true":
			return true, nil
		case "false":
			return false, nil
		}
		return nil, c.errorf(n.Line, "invalid boolean %q", n.Value)
	case "!!int", "!!float":
		return c.number(n)
	case "!!str", "!!timestamp":
		return n.Value, nil
	default:
		return nil, c.errorf(n.Line, "unsupported tag %s", tag)
	}
}

// number accepts a YAML number written in the JSON form, so that conf.Number always holds
// text every reader understands alike.
func (c *yamlConv) number(n *yaml.Node) (conf.Value, error) {
	s := n.Value
	if jsontok.IsNumber(s) {
		return conf.Number(s), nil
	}
	// Say what YAML makes of the other forms: "010" being 8 is a surprise worth telling.
	if i, err := strconv.ParseInt(s, 0, 64); err == nil {
		return nil, c.errorf(n.Line, "number %s must be written in plain decimal (YAML reads it as %d)", s, i)
	}
	switch strings.ToLower(strings.TrimLeft(s, "+-")) {
	case ".inf", ".nan":
		return nil, c.errorf(n.Line, "number %s is not allowed: numbers must be finite", s)
	}
	f, err := strconv.ParseFloat(s, 64)
	if err == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
		return nil, c.errorf(n.Line, "number %s must be written in plain decimal (YAML reads it as %s)", s, strconv.FormatFloat(f, 'g', -1, 64))
	}
	return nil, c.errorf(n.Line, "invalid number %q", s)
}

func kindName(k yaml.Kind) string {
	switch k {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "sequence"
	}
	return "node of kind " + strconv.Itoa(int(k))
}
