package main

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
)

// The tests run at the module's root, where the paths of the generated files start.
func TestMain(m *testing.M) {
	root, err := moduleRoot()
	if err == nil {
		err = os.Chdir(root)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// TestGenerated fails when a committed file is not what go generate writes, and when a second
// run would change what the first one wrote.
func TestGenerated(t *testing.T) {
	for _, f := range files() {
		want, old, err := generate(f)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(old, want) {
			t.Errorf("%s is stale: run go generate ./schema (or make generate)", f.path)
		}
		again, err := f.make(want)
		if err != nil {
			t.Fatalf("%s, made again: %v", f.path, err)
		}
		if !bytes.Equal(again, want) {
			t.Errorf("%s: a second go generate changes it", f.path)
		}
	}
}

// TestGrammarSource: a source that restates what its reader states, describes a field the
// reader does not read, or leaves one undescribed, fails generation, naming the field.
func TestGrammarSource(t *testing.T) {
	cases := []struct{ name, old, new, want string }{
		{"type restated", `"cost": {`, `"cost": {"type": "integer", `, "cost states type"},
		{"bound restated", `"nodes": {`, `"nodes": {"maximum": 5, `, "nodes states maximum"},
		{"default restated", `"cost": {`, `"cost": {"default": 1, `, "cost states default"},
		{"enum restated", `"mode": {`, `"mode": {"enum": ["local"], `, "mode states enum"},
		{"duration form restated", `"ban": {`, `"ban": {"$ref": "#/$defs/duration", `, "ban states $ref"},
		{"field not read", `"cost": {`, `"costs": {"description": "x"}, "cost": {`, "costs is described here but its decoder does not read it"},
		{"no description", `"description": "Units one request takes`, `"examples": [1], "x": "Units one request takes`, "cost has no description"},
		{"field not described", `"nodes": {`, `"nodes_": {`, "nodes is read by the decoder but has no entry here"},
		{"pattern restated", `"listen": {`, `"listen": {"pattern": "^.*$", `, "listen states pattern"},
		{"items' pattern restated", `"minItems": 1`, `"minItems": 1, "items": {"pattern": "^.*$"}`, "redis.addrs states its items' pattern"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, g := range grammars[:2] { // rule.json and dianad.json: each case edits one
				name := g.source()
				src, err := os.ReadFile(name)
				if err != nil {
					t.Fatal(err)
				}
				b := bytes.Replace(src, []byte(c.old), []byte(c.new), 1)
				if bytes.Equal(b, src) {
					continue
				}
				_, err = merged(name, b, g.fields())
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Errorf("%s: error %v, want one saying %q", name, err, c.want)
				}
				return
			}
			t.Fatalf("%q is in no source", c.old)
		})
	}
	for _, g := range grammars[:2] {
		name := g.source()
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := merged(name, src, g.fields()); err != nil {
			t.Errorf("the committed source %s: %v", name, err)
		}
	}
}
