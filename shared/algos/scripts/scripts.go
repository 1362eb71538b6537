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
	return callLocals + body, nil
}

// Batch returns the script that makes many decisions of the algorithm name in one call, in
// order, each as Source's script would make it: KEYS holds two keys per decision (its state and
// its ban, which is read only when it bans), ARGV two arguments (the packed integers and the
// lease id, "0" for none); for a Whole script, which neither bans nor holds a lease, one of
// each (its state, its packed integers). The reply is one string, cmsgpack's packing of an array
// that holds each decision's reply (an array of integers), or for one that failed (the others
// still run) a map {err = its message}: a caller reads it without the array and the boxed
// integer per number that Redis's own reply of nested arrays would cost it.
// Redis's TIME is read once, for every decision of the call: one call costs Redis the call's
// overhead and the clock once instead of once per decision.
func Batch(name string) (string, error) {
	body, err := decision(name)
	if err != nil {
		return "", err
	}
	each := "for i = 1, #ARGV / 2 do\n  keys[1], keys[2], argv[1], argv[2] = KEYS[2 * i - 1], KEYS[2 * i], ARGV[2 * i - 1], ARGV[2 * i]\n"
	if whole[name] {
		each = "for i = 1, #ARGV do\n  keys[1], argv[1] = KEYS[i], ARGV[i]\n"
	}
	return callLocals + "local function one(KEYS, ARGV)\n" + body + `end
local out, keys, argv = {}, {}, {} -- one decision's KEYS and ARGV, the same tables for each
` + each + `  local ok, r = pcall(one, keys, argv)
  if not ok then
    if type(r) == 'table' then r = r.err end -- redis.call's errors are tables
    r = {err = tostring(r)}
  end
  out[i] = r
end
return cmsgpack.pack(out)
`, nil
}

// callLocals are what a script call's decisions share: clock, Redis's TIME in µs once read; and
// decimals, the strings of numbers once formatted (see counter.lua), nil until a decision needs it.
const callLocals = "local clock, decimals\n"

// whole names the scripts that are a whole decision on their own, without the prelude and the
// epilogue: the counter's (counter.lua), which runs on every hit of envoyproxy/ratelimit's
// counting, where reading and rewriting the prelude's string state would cost Redis several
// times the count itself.
var whole = map[string]bool{"counter": true}

// Whole reports whether the script of the algorithm name is a whole decision on its own (see
// whole): it reads one key and one argument, and its batch script takes one of each per decision.
func Whole(name string) bool { return whole[name] }

// decision is the code of one decision of algorithm name: the prelude, the algorithm's code as
// the function decide(cost), and the epilogue; or the script alone if it is whole.
func decision(name string) (string, error) {
	body, err := files.ReadFile(name + ".lua")
	if err != nil {
		return "", fmt.Errorf("no Lua script for algorithm %q", name)
	}
	if whole[name] {
		return string(body), nil
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

// WriteBack returns the script that applies a decision of the algorithm name once per marker:
// the write-back of the units a node admitted on its own while Redis could not be reached
// (store/failover), which a retry must not charge twice. KEYS[1] and KEYS[2] are Source's (the
// ban key, or the state key again), KEYS[3] the marker, under the same hash tag; ARGV[1] and
// ARGV[2] are Source's (the lease id "0" for none), ARGV[3] the marker's life in ms, ARGV[4]
// how many µs before Redis's TIME the decision is made (0: at TIME; a caller-given time in
// ARGV[1] is used as it is): the units a node admitted some time ago count from then. It replies
// the decision, or false when the marker was there (the units were written back before). The
// decision runs before the marker is set: a decision that fails leaves no marker, so the retry
// applies it. The decision is the algorithm's own (a partial request, as the caller sends it):
// its Go twin is the transition, and the golden vectors already hold the two equal.
func WriteBack(name string) (string, error) {
	body, err := decision(name)
	if err != nil {
		return "", err
	}
	return callLocals + "local function one(KEYS, ARGV)\n" + body + `end
if redis.call('EXISTS', KEYS[3]) == 1 then return false end
local ago = tonumber(ARGV[4]) or 0
if ago > 0 then
  local t = redis.call('TIME')
  clock = tonumber(t[1]) * 1000000 + tonumber(t[2]) - ago
end
local r = one({KEYS[1], KEYS[2]}, {ARGV[1], ARGV[2]})
redis.call('SET', KEYS[3], '1', 'PX', ARGV[3])
return r
`, nil
}
