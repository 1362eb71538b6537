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

// Source returns the complete script for the algorithm whose Script().Name is name: one
// decision, KEYS and ARGV as prelude.lua describes them.
func Source(name string) (string, error) {
	body, err := decision(name)
	if err != nil {
		return "", err
	}
	return "local clock\n" + body, nil
}

// Batch returns the script that makes many decisions of the algorithm name in one call, in
// order, each as Source's script would make it: KEYS holds two keys per decision (its state and
// its ban, which is read only when it bans), ARGV two arguments (the packed integers and the
// lease id, "0" for none). The reply holds each decision's reply, or an error reply for one
// that failed (the others still run).
// Redis's TIME is read once, for every decision of the call: one call costs Redis the call's
// overhead and the clock once instead of once per decision.
func Batch(name string) (string, error) {
	body, err := decision(name)
	if err != nil {
		return "", err
	}
	return "local clock\nlocal function one(KEYS, ARGV)\n" + body + `end
local out = {}
for i = 1, #ARGV / 2 do
  local ok, r = pcall(one, {KEYS[2 * i - 1], KEYS[2 * i]}, {ARGV[2 * i - 1], ARGV[2 * i]})
  if not ok then
    if type(r) == 'table' then r = r.err end -- redis.call's errors are tables
    r = {err = tostring(r)}
  end
  out[i] = r
end
return out
`, nil
}

// decision is the code of one decision of algorithm name: the prelude, the algorithm's code as
// the function decide(cost), and the epilogue.
func decision(name string) (string, error) {
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

// Names lists the scripts: one per algorithm, named as the algorithm, one per refund
// (NAME + algos.RefundSuffix, for algos.Refund) and one per settlement (NAME +
// algos.SettleSuffix, for algos.Settle).
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
