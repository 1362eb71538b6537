package main

import (
	"encoding/json"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/diana-gw/diana/internal/redistest"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/memstore"
)

// The edges of Kong's schema (issue 40): every value Kong's validation takes at the edge of a
// field of the dump (an integer's bounds, each one_of, the shortest and longest durations, an
// empty list, written as [] or as Lua cjson's {}), alone and beside each other field's edges,
// limits: where the plugin cannot do exactly what the config says, it takes the nearest value it
// can, with a warning naming the field; it never runs unlimited.

// durationEdges are durations to try in a duration field; Kong's patterns sort out those it
// refuses.
var durationEdges = []string{"0s", "1us", "59us", "1ms", "1s", "1m", "1h", "1d", "1w", "1y", "2y", "100y", "99999999999999y"}

// edges returns the values of f that Kong's validation takes at its edges.
func (s kongSchema) edges(f kongSchemaField) []any {
	d := f.def
	var vs []any
	switch d["type"] {
	case "boolean":
		vs = []any{false, true}
	case "integer":
		b := d["between"].([]any)
		vs = []any{b[0], b[1]}
	case "array":
		vs = []any{[]any{}, emptyObject{}}
	case "string":
		if oneOf, ok := d["one_of"].([]any); ok {
			vs = oneOf
			break
		}
		if m, ok := d["match_any"].(map[string]any); ok && strings.Contains(fmt.Sprint(m["err"]), "duration") {
			for _, x := range durationEdges {
				vs = append(vs, x)
			}
		}
	}
	var ok []any
	for _, v := range vs {
		if _, isObj := v.(emptyObject); isObj || validateField(d, v) == nil {
			ok = append(ok, v)
		}
	}
	return ok
}

// emptyObject is {}: how Lua's cjson encodes an empty table that lacks the array metatable, as
// Kong may send an empty list.
type emptyObject struct{}

func (emptyObject) MarshalJSON() ([]byte, error) { return []byte("{}"), nil }

// edgeCase is a config of one or two fields set at their edges (the others at their defaults),
// valid for Kong.
type edgeCase struct {
	set map[string]any
	cfg map[string]any // as Kong sends it: defaults filled in
}

// edgeCases returns every Kong-valid config of one field at an edge, and, with pairs, of two.
func (s kongSchema) edgeCases(pairs bool) []edgeCase {
	type fv struct {
		name string
		v    any
	}
	var all []fv
	for _, f := range s.fields {
		for _, v := range s.edges(f) {
			all = append(all, fv{f.name, v})
		}
	}
	var out []edgeCase
	try := func(set map[string]any) {
		check := map[string]any{}
		for k, v := range set {
			if _, ok := v.(emptyObject); ok {
				v = []any{} // Kong reads an empty table as an empty array
			}
			check[k] = v
		}
		cfg, err := s.kongValidate(check)
		if err != nil {
			return
		}
		for k, v := range set {
			cfg[k] = v
		}
		out = append(out, edgeCase{set, cfg})
	}
	for i, a := range all {
		try(map[string]any{a.name: a.v})
		if !pairs {
			continue
		}
		for _, b := range all[i+1:] {
			if b.name != a.name {
				try(map[string]any{a.name: a.v, b.name: b.v})
			}
		}
	}
	return out
}

// decodes reports why cfg, as Kong sends it, does not become rules an engine takes; "" when it
// does.
func decodes(cfg map[string]any, id string) (*settings, string) {
	sent := map[string]any{"__plugin_id": id}
	for k, v := range cfg {
		sent[k] = v
	}
	b, err := json.Marshal(sent)
	if err != nil {
		return nil, err.Error()
	}
	st, err := parse(b, false)
	if err != nil {
		return nil, err.Error()
	}
	store := rules.Each(memstore.New(memstore.Options{MaxEntries: 64}).Decide)
	if _, err := rules.New(st.Rules, rules.Options{Local: store, Cluster: store, EscapedSlashes: st.Path.Slashes, StripDotsSpaces: st.Path.StripDotsSpaces}); err != nil {
		return nil, err.Error()
	}
	return st, ""
}

// Every pair of fields at their edges decodes into rules; each adapted value is warned about,
// naming its field.
func TestSchemaEdgesDecode(t *testing.T) {
	s := dumpedSchema(t)
	cases := s.edgeCases(true)
	if len(cases) < 1000 {
		t.Fatalf("only %d edge cases", len(cases))
	}
	failed := map[string]bool{}
	for i, c := range cases {
		if _, why := decodes(c.cfg, fmt.Sprint("edge-", i)); why != "" {
			b, _ := json.Marshal(c.set)
			failed[string(b)+": "+why] = true
		}
	}
	var list []string
	for k := range failed {
		list = append(list, k)
	}
	sort.Strings(list)
	for i, k := range list {
		if i == 20 {
			t.Errorf("... and %d more", len(list)-20)
			break
		}
		t.Errorf("Kong takes %s", k)
	}
	t.Logf("%d configs of one or two fields at their edges, all decoded", len(cases))
}

// Each field at each of its edges, and the cases the plugin adapts, through the real binary:
// the config starts and limits (no request is let through for an invalid config; a main limit
// of 1 per hour refuses the second request), and an adapted value is warned about, naming its
// field, in Kong's error log.
func TestSchemaEdgesBinary(t *testing.T) {
	s := dumpedSchema(t)
	type binCase struct {
		name  string
		set   map[string]any
		field string // the field the warning names; "" for none
	}
	named := []binCase{
		{"subwindows beyond a 1us window", map[string]any{"subwindows": 25.0, "window": "1us"}, "subwindows"},
		{"subwindows beyond the path limit's 1us window", map[string]any{"subwindows": 25.0, "path_limit": 5.0, "path_window": "1us"}, "subwindows"},
		{"redis_addrs as {}", map[string]any{"policy": "redis", "redis_addrs": emptyObject{}}, ""}, // redis_host and redis_port then
	}
	redis := redistest.Start(t)
	host, port, _ := net.SplitHostPort(redis.Addr)
	p, _ := strconv.Atoi(port)
	named[2].set["redis_host"], named[2].set["redis_port"] = host, float64(p)
	every := map[string]any{}
	for _, f := range s.fields {
		if f.def["type"] == "array" {
			every[f.name] = emptyObject{}
		}
	}
	named = append(named, binCase{"every list as {}", every, ""})
	cases := named
	for i, c := range s.edgeCases(false) {
		cases = append(cases, binCase{fmt.Sprint("edge ", i), c.set, ""})
	}
	srv := startServer(t, build(t, "github.com/diana-gw/diana/kongplugin", "diana"))
	for i, tc := range cases {
		check := map[string]any{}
		for k, v := range tc.set {
			if _, ok := v.(emptyObject); ok {
				v = []any{}
			}
			check[k] = v
		}
		cfg, err := s.kongValidate(check)
		if err != nil {
			t.Fatalf("%s: Kong refuses %v: %v", tc.name, tc.set, err)
		}
		for k, v := range tc.set {
			cfg[k] = v
		}
		observed := i < len(named) // the named cases: a main limit of 1 per hour, reached
		if observed {
			cfg["limit"], cfg["window"], cfg["algorithm"] = 1.0, "1h", "sliding_window"
			if tc.set["window"] != nil {
				cfg["window"] = tc.set["window"]
				cfg["limit"] = 1e15 // reached by no request: the path limit below is
				cfg["path_limit"], cfg["path_window"] = 1.0, "1h"
			}
		}
		id := srv.start(cfg, fmt.Sprintf("edge-%d", i))
		req := requestFor(cfg)
		var res kongResult
		for range 2 {
			res = srv.access(id, req)
			for _, l := range res.Logs {
				if strings.Contains(l, "invalid config") {
					b, _ := json.Marshal(tc.set)
					t.Fatalf("%s: Kong takes %s, the plugin lets requests through: %s", tc.name, b, l)
				}
			}
		}
		if observed && (!res.Exit || res.Status != 429) {
			t.Errorf("%s: the second request over a limit of 1: %+v, want 429", tc.name, res)
		}
		if tc.field != "" && !logsSoon(srv, fmt.Sprintf("plugin edge-%d: warning: %s:", i, tc.field)) {
			t.Errorf("%s: no warning names %s in the plugin's log:\n%s", tc.name, tc.field, srv.logs.String())
		}
	}
	t.Logf("%d configs through the binary: %d with a field at an edge, %d adapted cases", len(cases), len(cases)-len(named), len(named))
}

// logsSoon reports whether the plugin server's log holds line within 5 s: the server writes it
// before it answers, but its standard error reaches the buffer through a goroutine of os/exec.
func logsSoon(srv *pluginServer, line string) bool {
	for end := time.Now().Add(5 * time.Second); !strings.Contains(srv.logs.String(), line); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			return false
		}
	}
	return true
}
