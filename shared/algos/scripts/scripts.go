// Package scripts holds the Redis Lua twin of every algorithm in shared/algos, one file per
// algorithm. At load time each is wrapped as the function decide(cost), between prelude.lua
// (arguments, time, the ban, state words, write-back) and epilogue.lua (the call, and a ban's
// reply); wide.lua (muldiv) comes first if the algorithm calls it (a Lua function costs Redis CPU
// on every call that defines it, so only the scripts that need it do). Only Redis stores import
// it, so the wasm build stays small.
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
	src, _ := files.ReadFile("prelude.lua")
	if strings.Contains(string(body), "muldiv(") {
		wide, _ := files.ReadFile("wide.lua")
		src = append(src, wide...)
	}
	epilogue, _ := files.ReadFile("epilogue.lua")
	return string(src) + "local function decide(cost)\n" + string(body) + string(epilogue), nil
}

// Names lists the scripts: one per algorithm, named as the algorithm, and one per refund
// (NAME + algos.RefundSuffix, for algos.Refund).
func Names() []string {
	entries, _ := files.ReadDir(".")
	var names []string
	for _, e := range entries {
		name := strings.TrimSuffix(e.Name(), ".lua")
		if name != "prelude" && name != "wide" && name != "epilogue" {
			names = append(names, name)
		}
	}
	return names
}
