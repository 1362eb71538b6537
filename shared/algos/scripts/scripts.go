// Package scripts holds the Redis Lua twin of every algorithm in shared/algos, one file per
// algorithm, each preceded at load time by prelude.lua (arguments, time, ban check, helpers,
// write-back). Only Redis stores import it, so the wasm build stays small.
package scripts

import (
	"embed"
	"fmt"
	"strings"
)

//go:embed *.lua
var files embed.FS

// Source returns the complete script for the algorithm whose Script().Name is name.
func Source(name string) (string, error) {
	body, err := files.ReadFile(name + ".lua")
	if err != nil {
		return "", fmt.Errorf("no Lua script for algorithm %q", name)
	}
	prelude, _ := files.ReadFile("prelude.lua")
	return string(prelude) + string(body), nil
}

// Names lists the algorithms that have a script.
func Names() []string {
	entries, _ := files.ReadDir(".")
	var names []string
	for _, e := range entries {
		name := strings.TrimSuffix(e.Name(), ".lua")
		if name != "prelude" {
			names = append(names, name)
		}
	}
	return names
}
