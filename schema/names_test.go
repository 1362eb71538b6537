package schema

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/diana-gw/diana/httplimit"
	"github.com/diana-gw/diana/internal/algotest"
	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/algos/scripts"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/sim"
)

// TestAlgorithmNames ties every list of algorithms to the one place they are named, shared/rules'
// registry: adding an algorithm is its file in shared/algos, its Lua twin and its registration,
// and this test names whatever else still lacks it. The generated files (limit.schema.json, the
// docs' tables) are checked by schema/internal/gen's TestGenerated, the Kong plugin's algorithm
// one_of by its own test.
func TestAlgorithmNames(t *testing.T) {
	names := rules.Algorithms()
	for _, name := range names {
		k, _ := rules.Algorithm(name)
		a, err := k.Build(k.Example(), 1)
		if err != nil {
			t.Errorf("%s: its example does not build: %v", name, err)
			continue
		}
		if got := a.Script().Name; got != name {
			t.Errorf("%s builds an algorithm named %q: one algorithm, one name", name, got)
		}
		for _, p := range k.Params {
			if p.Doc == "" || p.Type == "" || (p.Type != rules.Flag && p.Min > p.Max) {
				t.Errorf("%s: parameter %+v is not fully stated", name, p)
			}
		}
		if k.Doc == "" || k.LimitDoc == "" || k.ResetDoc == "" {
			t.Errorf("%s: its docs (Doc, LimitDoc, ResetDoc) are missing", name)
		}
	}
	// A local-only algorithm (adaptive) has no Lua twin, nor a place in the stores' exact limits
	// or the accuracy report: its proof is its own report (make report-adaptive).
	shared := rules.AlgorithmsWhere(func(k rules.AlgorithmKind) bool { return !k.LocalOnly })
	var twins []string
	for _, n := range scripts.Names() {
		base, ok := strings.CutSuffix(n, algos.RefundSuffix) // a refund goes with its algorithm
		if !ok {
			base, ok = strings.CutSuffix(n, algos.SettleSuffix) // and so does a settlement
		}
		if ok {
			if !slices.Contains(shared, base) {
				t.Errorf("Lua script %s: no registered algorithm %s", n, base)
			}
			continue
		}
		if n == "counter" {
			continue // algos.Counter, the rate limit service's counting, not a rule's algorithm (TestDiffCounter)
		}
		twins = append(twins, n)
	}
	if got := slices.Sorted(slices.Values(twins)); !slices.Equal(got, shared) {
		t.Errorf("Lua scripts %v, registered algorithms %v: each needs its twin", got, shared)
	}
	var exact, simulated []string
	for _, l := range algotest.Exact() {
		exact = append(exact, l.Alg.Script().Name)
	}
	for _, a := range sim.Algorithms(sim.Limit{Units: 100, Window: algos.Second}, algos.Millisecond) {
		simulated = append(simulated, a.Name)
	}
	for _, list := range []struct {
		what  string
		names []string
	}{{"internal/algotest's exact limits (the stores' tests)", exact}, {"the simulator (make report)", simulated}} {
		for _, name := range shared {
			if !slices.Contains(list.names, name) {
				t.Errorf("%s lack %s", list.what, name)
			}
		}
	}
}

// TestEnumsFromRules: the enums the schemas state by hand are the ones shared/rules decodes.
func TestEnumsFromRules(t *testing.T) {
	set := loadSchemas(t)
	for _, c := range []struct {
		file, ptr string
		want      []string
	}{
		{RuleFile, "/properties/reply/properties/headers/oneOf/1/enum", rules.HeaderStyleNames[:]},
		{DianadFile, "/properties/escaped_slashes/enum", rules.EscapedSlashesNames[:]},
		{DianadFile, "/properties/client_ip_header/enum", httplimit.ClientIPHeaderNames[:]},
	} {
		var node any = set[c.file]
		for _, k := range strings.Split(c.ptr[1:], "/") {
			switch n := node.(type) {
			case map[string]any:
				node = n[k]
			case []any:
				i, _ := strconv.Atoi(k)
				node = n[i]
			}
		}
		list, _ := node.([]any)
		var got []string
		for _, v := range list {
			got = append(got, v.(string))
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s#%s is %v, shared/rules has %v", c.file, c.ptr, got, c.want)
		}
	}
}
