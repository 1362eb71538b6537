// Package scripts holds the Redis Lua twin of every algorithm in shared/algos, one file per
// algorithm. At load time each is made the function decide, which prelude.lua's apply calls
// (arguments, time, the ban, state words, write-back, a ban's reply); wide.lua (muldiv) comes
// first if the algorithm calls it (a Lua function costs Redis CPU on every call that defines it,
// so only the scripts that need it do). Mixed puts every one of them in one script, which makes a
// round trip's decisions in one call. Only Redis stores import it, so the wasm build stays small.
package scripts

import (
	"embed"
	"fmt"
	"strings"
	"sync"
)

//go:embed *.lua
var files embed.FS

// Source returns the complete script for the algorithm whose Script().Name is name: one
// decision, KEYS and ARGV as prelude.lua describes them.
func Source(name string) (string, error) {
	defs, call, err := decision(name)
	if err != nil {
		return "", err
	}
	return callLocals + defs + "return " + call + "\n", nil
}

// Mixed returns the script that makes many decisions in one call, of any algorithms, in order:
// every algorithm's decision (Source's), each made a function only when a call first needs it
// (a Lua function costs Redis CPU on every call that defines it). The decisions come in groups:
// a run of independent decisions, each as Source's script would make it; or the limits of one
// request, decided together, all or nothing (algos.Together, its Go twin).
//
// ARGV[1] is the layout, MessagePack integers: for each group, n·4 + together·2 + denied (n its
// decisions; denied: a limit decided elsewhere refused the request), then for each decision,
// alg·8 + direct·4 + ban·2 + shadow, where alg is the algorithm's place in Names (from 1), direct
// says that its script writes its state itself (a sorted set, or a Whole script), ban that it
// bans, shadow that it counts towards no verdict. Then each decision's KEYS and ARGV follow, as
// Source's script takes them: two keys (its state, and its ban or the state again) and two
// arguments (the packed integers and the lease id, "0" for none); for a Whole script, one of each.
//
// A group decided together is decided as algos.Together decides it, atomically: each decision
// is made once with its writes held back (a direct one as a dry run); the request is admitted
// when no decision that is not a shadow's denies it and denied is 0. Then the writes held are
// made (a direct decision is made again, for real); when the request is refused, only the bans
// that its non-shadow denials start. If a decision of the group fails, every decision of the
// group gets its error and nothing of the group is written.
//
// The reply is one string, cmsgpack's packing of an array that holds each decision's reply (an
// array of integers), or for one that failed (the others still run) a map {err = its message}:
// a caller reads it without the array and the boxed integer per number that Redis's own reply of
// nested arrays would cost it. Redis's TIME is read once, for every decision of the call: one
// call costs Redis the call's overhead and the clock once instead of once per decision.
func Mixed() string {
	mixedOnce.Do(func() { mixed = buildMixed() })
	return mixed
}

var (
	mixedOnce sync.Once
	mixed     string
)

func buildMixed() string {
	var b strings.Builder
	b.WriteString(callLocals)
	b.WriteString(uncommented(file("prelude.lua") + file("wide.lua")))
	b.WriteString("local fns = {}\n-- The decision of algorithm a (its place in Names), made on first use.\nlocal function get(a)\n  local f = fns[a]\n  if f then return f end\n")
	var wholes []string
	for i, name := range Names() {
		kw := "elseif"
		if i == 0 {
			kw = "if"
		}
		args := params
		if whole[name] {
			args = "KEYS, ARGV"
			wholes = append(wholes, fmt.Sprintf("[%d] = true", i+1))
		}
		fmt.Fprintf(&b, "  %s a == %d then f = function(%s) -- %s\n%s\n  end\n", kw, i+1, args, name, uncommented(file(name+".lua")))
	}
	b.WriteString("  end\n  fns[a] = f\n  return f\nend\n")
	b.WriteString("local wholes = {" + strings.Join(wholes, ", ") + "}\n")
	b.WriteString(file("mixed.lua"))
	return b.String()
}

// file is the embedded file name, which exists.
func file(name string) string {
	b, err := files.ReadFile(name)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// uncommented is src without its lines of comments alone, which make the mixed script, every
// algorithm in one, a third larger for nothing.
func uncommented(src string) string {
	var b strings.Builder
	for line := range strings.Lines(src) {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			b.WriteString(line)
		}
	}
	return b.String()
}

// callLocals are what a script call's decisions share: clock, Redis's TIME in µs once read;
// decimals, the strings of numbers once formatted (see counter.lua), nil until a decision needs
// it; and for a group decided together (see Mixed), defer, where a decision's writes are held
// back, and dryrun, which makes a decision a dry run.
const callLocals = "local clock, decimals, defer, dryrun\n"

// whole names the scripts that are a whole decision on their own, without the prelude: the
// counter's (counter.lua), which runs on every hit of envoyproxy/ratelimit's
// counting, where reading and rewriting the prelude's string state would cost Redis several
// times the count itself.
var whole = map[string]bool{"counter": true}

// Whole reports whether the script of the algorithm name is a whole decision on its own (see
// whole): it reads one key and one argument, and Mixed's script takes one of each per decision.
func Whole(name string) bool { return whole[name] }

// params are the parameters of an algorithm's function decide, which apply (prelude.lua) calls.
const params = "KEYS, now, cost, max_wait, partial, release, dry, backdated, limit, p1, p2, p3, p4, w1, w2, w3, w4, s, id"

// decision returns the definitions of a script of algorithm name, and the call that makes its
// decision of KEYS and ARGV: prelude.lua, wide.lua (muldiv) if the algorithm calls it, and the
// algorithm's code as the function decide, called by apply; or a whole script's code as the
// function decide(KEYS, ARGV).
func decision(name string) (defs, call string, err error) {
	body, err := files.ReadFile(name + ".lua")
	if err != nil {
		return "", "", fmt.Errorf("no Lua script for algorithm %q", name)
	}
	if whole[name] {
		return "local function decide(KEYS, ARGV)\n" + string(body) + "end\n", "decide(KEYS, ARGV)", nil
	}
	defs = file("prelude.lua")
	if strings.Contains(string(body), "muldiv(") {
		defs += file("wide.lua")
	}
	return defs + "local function decide(" + params + ")\n" + string(body) + "end\n", "apply(decide, KEYS, ARGV)", nil
}

// Names lists the scripts, in the order of Mixed's algorithm numbers: one per algorithm, named as the algorithm, one per refund
// (NAME + algos.RefundSuffix, for algos.Refund) and one per settlement (NAME +
// algos.SettleSuffix, for algos.Settle).
func Names() []string {
	entries, _ := files.ReadDir(".")
	var names []string
	for _, e := range entries {
		name := strings.TrimSuffix(e.Name(), ".lua")
		if name != "prelude" && name != "wide" && name != "mixed" {
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
	defs, call, err := decision(name)
	if err != nil {
		return "", err
	}
	return callLocals + defs + "local function one(KEYS, ARGV) return " + call + " end\n" + `if redis.call('EXISTS', KEYS[3]) == 1 then return false end
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
