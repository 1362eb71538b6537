package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/diana-gw/diana/internal/redistest"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/memstore"
)

// The property of issue 13: every config that Kong's schema validation accepts, with the
// schema the plugin dumps, limits. This file holds a small validator of Kong's schema semantics
// (kong/db/schema/init.lua: defaults, required, type, one_of, between, len_min, match,
// match_any, match_none, array elements, and the conditional entity check), a generator of
// random configs from the dump, and the test that runs them through the decoder and through
// the real plugin binary over its socket.

// kongSchema is the config record of the dump, and its entity checks.
type kongSchema struct {
	fields []kongSchemaField
	checks []map[string]any // the conditional of each entity check
}

type kongSchemaField struct {
	name string
	def  map[string]any
}

func dumpedSchema(t testing.TB) kongSchema {
	t.Helper()
	b, err := dumpInfo("/usr/local/kong/diana.socket")
	if err != nil {
		t.Fatal(err)
	}
	var info struct {
		Plugins []struct {
			Schema struct {
				Fields       []map[string]map[string]any
				EntityChecks []map[string]map[string]any `json:"entity_checks"`
			}
		}
	}
	if err := json.Unmarshal(b, &info); err != nil {
		t.Fatal(err)
	}
	var s kongSchema
	for _, raw := range info.Plugins[0].Schema.Fields[0]["config"]["fields"].([]any) {
		for name, def := range raw.(map[string]any) {
			s.fields = append(s.fields, kongSchemaField{name, def.(map[string]any)})
		}
	}
	for _, ec := range info.Plugins[0].Schema.EntityChecks {
		c, ok := ec["conditional"]
		if !ok || len(ec) != 1 {
			t.Fatalf("entity check %v: the validator knows conditional only", ec)
		}
		s.checks = append(s.checks, c)
	}
	return s
}

// kongValidate fills in the defaults and validates cfg as Kong does on a plugin insert; it
// returns the config Kong would store (and send to the plugin) or the first error.
func (s kongSchema) kongValidate(cfg map[string]any) (map[string]any, error) {
	out := map[string]any{}
	byName := map[string]map[string]any{}
	for k, v := range cfg {
		out[k] = v
	}
	for _, f := range s.fields {
		byName[f.name] = f.def
		if _, ok := out[f.name]; !ok && f.def["default"] != nil {
			out[f.name] = f.def["default"]
		}
		if err := validateField(f.def, out[f.name]); err != nil {
			return nil, fmt.Errorf("config.%s: %v", f.name, err)
		}
	}
	for k := range cfg {
		if byName[k] == nil {
			return nil, fmt.Errorf("config.%s: unknown field", k)
		}
	}
	for _, c := range s.checks {
		ifField := strings.TrimPrefix(c["if_field"].(string), "config.")
		thenField := strings.TrimPrefix(c["then_field"].(string), "config.")
		ifValue := out[ifField]
		if ifValue == nil { // run_with_missing_fields = false
			continue
		}
		if validateField(merge(c["if_match"].(map[string]any), byName[ifField]), ifValue) != nil {
			continue
		}
		then := c["then_match"].(map[string]any)
		if then["required"] == true && out[thenField] == nil {
			return nil, fmt.Errorf("config.%s: required field missing (entity check on %s)", thenField, ifField)
		}
		if err := validateField(merge(then, byName[thenField]), out[thenField]); err != nil {
			return nil, fmt.Errorf("config.%s: %v (entity check on %s)", thenField, err, ifField)
		}
	}
	return out, nil
}

// merge is a conditional's match with the field's own schema behind it (Kong sets the field as
// the match's metatable __index).
func merge(match, field map[string]any) map[string]any {
	m := map[string]any{}
	for k, v := range field {
		if k != "required" && k != "default" {
			m[k] = v
		}
	}
	for k, v := range match {
		m[k] = v
	}
	return m
}

// validateField is Schema:validate_field for the attributes the dump uses.
func validateField(f map[string]any, v any) error {
	if v == nil {
		if f["required"] == true {
			return fmt.Errorf("required field missing")
		}
		return nil
	}
	if eq, ok := f["eq"]; ok && eq != v {
		return fmt.Errorf("value must be %v", eq)
	}
	switch f["type"] {
	case "integer":
		n, ok := v.(float64)
		if !ok || n != float64(int64(n)) {
			return fmt.Errorf("expected an integer")
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return fmt.Errorf("expected a boolean")
		}
	case "array":
		l, ok := v.([]any)
		if !ok {
			return fmt.Errorf("expected an array")
		}
		el := f["elements"].(map[string]any)
		el["required"] = true
		for i, e := range l {
			if err := validateField(el, e); err != nil {
				return fmt.Errorf("[%d]: %v", i+1, err)
			}
		}
		return nil
	case "string":
		str, ok := v.(string)
		if !ok {
			return fmt.Errorf("expected a string")
		}
		return validateString(f, str)
	default:
		return fmt.Errorf("type %v unknown to the validator", f["type"])
	}
	if oneOf, ok := f["one_of"].([]any); ok && !slices.Contains(oneOf, v) {
		return fmt.Errorf("expected one of: %v", oneOf)
	}
	if b, ok := f["between"].([]any); ok {
		if n := v.(float64); n < b[0].(float64) || n > b[1].(float64) {
			return fmt.Errorf("value should be between %d and %d", int64(b[0].(float64)), int64(b[1].(float64)))
		}
	}
	return nil
}

func validateString(f map[string]any, s string) error {
	if oneOf, ok := f["one_of"].([]any); ok && !slices.Contains(oneOf, any(s)) {
		return fmt.Errorf("expected one of: %s", strings.Join(toStrings(oneOf), ", "))
	}
	lenMin := 1.0 // Kong refuses empty strings unless len_min says otherwise
	if n, ok := f["len_min"].(float64); ok {
		lenMin = n
	}
	if float64(len(s)) < lenMin {
		return fmt.Errorf("length must be at least %v", lenMin)
	}
	if none, ok := f["match_none"].([]any); ok {
		for _, n := range none {
			if luaMatch(n.(map[string]any)["pattern"].(string), s) {
				return fmt.Errorf("%v", n.(map[string]any)["err"])
			}
		}
	}
	if p, ok := f["match"].(string); ok && !luaMatch(p, s) {
		return fmt.Errorf("invalid value: %s", s)
	}
	if m, ok := f["match_any"].(map[string]any); ok {
		for _, p := range m["patterns"].([]any) {
			if luaMatch(p.(string), s) {
				return nil
			}
		}
		return fmt.Errorf("%v", m["err"])
	}
	return nil
}

// genLua returns a random string that matches the Lua pattern p (the subset luaRegexp takes).
func genLua(r *rand.Rand, p string) string {
	var b strings.Builder
	classes := map[byte]string{'d': "0123456789", 'w': "abcXYZ019", 'x': "0123abcdef", 'a': "abcXYZ"}
	for i := 0; i < len(p); i++ {
		var set string
		switch c := p[i]; {
		case c == '^' && i == 0, c == '$' && i == len(p)-1:
			continue
		case c == '%':
			i++
			if cl, ok := classes[p[i]]; ok {
				set = cl
			} else {
				set = string(p[i])
			}
		case c == '[':
			j := strings.IndexByte(p[i+1:], ']') + i + 1
			for j > 0 && p[j-1] == '%' { // an escaped ]
				j = strings.IndexByte(p[j+1:], ']') + j + 1
			}
			body := p[i+1 : j]
			i = j
			if strings.HasPrefix(body, "^") {
				set = "x"
				break
			}
			for k := 0; k < len(body); k++ {
				switch {
				case body[k] == '%' && k+1 < len(body):
					k++
					if cl, ok := classes[body[k]]; ok {
						set += cl
					} else {
						set += string(body[k])
					}
				case k+2 < len(body) && body[k+1] == '-':
					for ch := body[k]; ch <= body[k+2]; ch++ {
						set += string(ch)
					}
					k += 2
				default:
					set += string(body[k])
				}
			}
		case c == '.':
			set = "abc"
		default:
			set = string(c)
		}
		n := 1
		if i+1 < len(p) {
			switch p[i+1] {
			case '?':
				n, i = r.IntN(2), i+1
			case '*':
				n, i = r.IntN(3), i+1
			case '+':
				n, i = 1+r.IntN(3), i+1
			}
		}
		for range n {
			b.WriteByte(set[r.IntN(len(set))])
		}
	}
	return b.String()
}

// junk are strings operators write by mistake, or Konga leaves behind.
var junk = []string{"", "abc", "1M", "1.5s", "1m30s", "0s", "01s", "10y", "11y", "3650d", "60", "-1s", " 1s",
	"X-Api-Key", "a b", "/api/**", "/login", "/a/*/b", "api", "/a**", "/**/x", "/a?b", "mymaster", "secret",
	"diana:", "redis.example", "redis.example:6379", "[::1]:6380", "host:0", "host:65536", "::1", "x"}

// genConfig returns a random config of the dump's fields: each absent or set, to a value that
// its constraints take or to junk (the validator sorts them out).
func (s kongSchema) genConfig(r *rand.Rand) map[string]any {
	cfg := map[string]any{}
	bad := r.IntN(4) == 0 // a config with mistakes in it, for the validator to refuse (or not)
	mistake := func() bool { return bad && r.IntN(6) == 0 }
	for _, f := range s.fields {
		if r.IntN(3) == 0 {
			continue
		}
		d := f.def
		str := func(d map[string]any) string {
			if oneOf, ok := d["one_of"].([]any); ok && !mistake() {
				return oneOf[r.IntN(len(oneOf))].(string)
			}
			if m, ok := d["match_any"].(map[string]any); ok && !mistake() {
				ps := m["patterns"].([]any)
				return genLua(r, ps[r.IntN(len(ps))].(string))
			}
			return junk[r.IntN(len(junk))]
		}
		switch d["type"] {
		case "boolean":
			cfg[f.name] = r.IntN(2) == 0
		case "integer":
			b := d["between"].([]any)
			lo, hi := int64(b[0].(float64)), int64(b[1].(float64))
			var n int64
			switch r.IntN(6) {
			case 0:
				n = lo
			case 1:
				n = hi
			case 2:
				n = lo + r.Int64N(min(hi-lo+1, 6))
			case 3:
				n = int64(pow10(r.IntN(16)))
			default:
				n = lo + r.Int64N(hi-lo+1)
			}
			if !bad {
				n = min(max(n, lo), hi)
			} else if mistake() {
				n = []int64{lo - 1, hi + 1}[r.IntN(2)]
			}
			cfg[f.name] = float64(n)
		case "string":
			cfg[f.name] = str(d)
		case "array":
			var l []any
			for range r.IntN(3) {
				l = append(l, str(d["elements"].(map[string]any)))
			}
			cfg[f.name] = l
		}
	}
	return cfg
}

func pow10(n int) float64 {
	v := 1.0
	for range n {
		v *= 10
	}
	return v
}

// TestSchemaValidLimits: thousands of random configs that Kong's validation accepts with the
// dumped schema all decode (as Kong sends them: defaults filled in, Kong's keys added) into
// rules that an engine takes; and a few hundred of them, with counts small enough to reach
// and windows long enough to stay in, run in the real plugin binary over its socket, where a
// request over the limit is refused, or (shadow, Redis failing open) logged in Kong's error log.
func TestSchemaValidLimits(t *testing.T) {
	s := dumpedSchema(t)
	r := rand.New(rand.NewPCG(13, 2026))
	mem := memstore.New(memstore.Options{MaxEntries: 1024})
	store := rules.Each(mem.Decide)
	const want = 3000
	var valid []map[string]any
	refused := 0
	for tries := 0; len(valid) < want; tries++ {
		if tries > 100*want {
			t.Fatalf("only %d valid configs in %d tries", len(valid), tries)
		}
		cfg, err := s.kongValidate(s.genConfig(r))
		if err != nil {
			refused++
			continue
		}
		valid = append(valid, cfg)
		sent := map[string]any{"__plugin_id": "prop-" + strconv.Itoa(len(valid))}
		for k, v := range cfg {
			sent[k] = v
		}
		b, _ := json.Marshal(sent)
		st, err := parse(b, false)
		if err != nil {
			t.Fatalf("Kong accepts %s\nbut the plugin refuses it: %v", b, err)
		}
		if _, err := rules.New(st.Rules, rules.Options{Local: store, Cluster: store, EscapedSlashes: st.Path.Slashes, StripDotsSpaces: st.Path.StripDotsSpaces}); err != nil {
			t.Fatalf("Kong accepts %s\nbut the engine refuses its rules: %v", b, err)
		}
	}
	t.Logf("%d configs valid for Kong, all decoded; %d refused by Kong's validation", len(valid), refused)

	// The real binary, over its socket.
	bin := build(t, "github.com/diana-gw/diana/kongplugin", "diana")
	srv := startServer(t, bin)
	redis := redistest.Start(t)
	host, port, _ := net.SplitHostPort(redis.Addr)
	ran, byLog, redisRan := 0, 0, 0
	for i, cfg := range valid {
		if i%10 != 0 {
			continue
		}
		observable(r, cfg, host, port)
		if _, err := s.kongValidate(cfg); err != nil {
			t.Fatalf("made observable, the config is no longer valid: %v\n%v", err, cfg)
		}
		id := srv.start(cfg, fmt.Sprintf("prop-bin-%d", i))
		req := requestFor(cfg)
		n := int(cfg["limit"].(float64)) + int(cfg["burst"].(float64)) + 3
		limited, logged := false, false
		var last kongResult
		for range n {
			last = srv.access(id, req)
			for _, l := range last.Logs {
				if strings.Contains(l, "invalid config") {
					t.Fatalf("config %v: %s", cfg, l)
				}
				logged = logged || strings.Contains(l, "would deny") || strings.Contains(l, "Redis could not decide")
			}
			if last.Exit { // the paths sent have no escaped slash: an exit is a limit
				limited = true
				break
			}
		}
		if !limited {
			byLog++
		}
		if cfg["policy"] == "redis" {
			redisRan++
		}
		if !limited && !logged {
			b, _ := json.Marshal(cfg)
			t.Fatalf("%d requests over a limit passed, silently: %s\nlast: %+v", n, b, last)
		}
		ran++
	}
	t.Logf("%d configs run in the plugin binary (%d with policy redis): each refused a request over its limit, or logged why not (%d: a shadow rule's would-be refusal, or Redis failing open)", ran, redisRan, byLog)
}

// observable makes a valid config's limit reachable in a few requests and its windows long,
// and points policy redis at the test's Redis; what the generator chose otherwise stays.
func observable(r *rand.Rand, cfg map[string]any, host, port string) {
	cfg["limit"] = float64(1 + r.IntN(4))
	if h, _ := cfg["usage_header"].(string); h != "" {
		// A token budget's request reserves its estimate: 0 would never reach the limit in the
		// access phase, whose requests are the ones sent here (no response charges them).
		cfg["usage_estimate"] = float64(1 + r.IntN(4))
	}
	if cfg["burst"].(float64) > 4 {
		cfg["burst"] = float64(r.IntN(5))
	}
	for _, w := range []string{"window", "ip_window", "consumer_window", "device_window", "path_window", "global_window"} {
		if d, _ := parseDurationUS(cfg[w].(string)); d < 60e6 {
			cfg[w] = "1h"
		}
	}
	if cfg["policy"] == "redis" {
		p, _ := strconv.Atoi(port)
		cfg["redis_host"], cfg["redis_port"], cfg["redis_addrs"] = host, float64(p), []any{}
		cfg["redis_sentinel_master"], cfg["redis_ssl"], cfg["redis_username"], cfg["redis_password"] = nil, false, nil, nil
		cfg["redis_cluster"], cfg["redis_database"] = false, float64(0)
		cfg["redis_wait_replicas"] = float64(0) // the test's Redis has no replica: WAIT would time out
	}
}

func parseDurationUS(s string) (int64, bool) {
	for _, u := range durationUnits {
		if n, err := strconv.ParseInt(strings.TrimSuffix(s, u.name), 10, 64); err == nil && strings.HasSuffix(s, u.name) {
			return n * u.us, true
		}
	}
	return 0, false
}

// requestFor is a request that every limit of cfg counts: it has every identity, and a path
// that the path pattern matches.
func requestFor(cfg map[string]any) *kongReq {
	req := &kongReq{IP: "192.0.2.13", Consumer: "c1", Credential: "k1", Service: "s1", Path: "/p", Headers: map[string]string{}}
	if h, ok := cfg["header_name"].(string); ok {
		req.Headers[strings.ToLower(h)] = "v1"
	}
	if h, ok := cfg["device_header"].(string); ok {
		req.Headers[strings.ToLower(h)] = "d1"
	}
	if p, ok := cfg["path"].(string); ok && cfg["limit_by"] == "path" {
		segs := strings.Split(p, "/")
		for i, s := range segs {
			if s == "*" || s == "**" {
				segs[i] = "x"
			}
		}
		req.Path = strings.Join(segs, "/")
	}
	return req
}
