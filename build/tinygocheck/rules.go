package main

import (
	"context"

	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/conf"
	"github.com/diana-gw/diana/shared/rules"
)

// rulesDoc has a per-IP and a global rule; the wasm filter reads the same format.
const rulesDoc = `{"rules": [
	{"name": "per-ip", "by": ["ip"], "limit": {"algorithm": "fixed_window", "limit": 3, "window": "1h"}},
	{"name": "global", "limit": {"algorithm": "token_bucket", "rate": 100, "period": "1s"}}
]}`

// checkRules parses a config with shared/conf, builds the rules and runs them on a map store:
// the first client is denied after 3 requests, a second one is not.
func checkRules() bool {
	doc, err := conf.ParseJSON([]byte(rulesDoc))
	if err != nil {
		println("rules: parse:", err.Error())
		return false
	}
	errs := &conf.Errors{Source: "tinygocheck"}
	o := conf.Read(doc, errs)
	rs := rules.Decode(o)
	o.Done()
	if err := errs.Err(); err != nil {
		println("rules:", err.Error())
		return false
	}
	states := map[string]*algos.State{}
	store := rules.Each(func(key string, a algos.Algorithm, r algos.Request) algos.Decision {
		st := states[key]
		if st == nil {
			st = &algos.State{}
			states[key] = st
		}
		r.Now = 1_700_000_000 * algos.Second
		if r.DryRun {
			cp := *st
			cp.Log = append([]int64(nil), st.Log...)
			return a.Decide(&cp, r)
		}
		return a.Decide(st, r)
	})
	e, err := rules.New(rs, rules.Options{Local: store})
	if err != nil {
		println("rules:", err.Error())
		return false
	}
	var got []bool
	for _, ip := range []string{"192.0.2.1", "192.0.2.1", "192.0.2.1", "192.0.2.1", "192.0.2.2"} {
		in := rules.Input{Method: "GET", Path: "/", ClientIP: ip}
		got = append(got, e.Check(context.Background(), &in).Allowed)
	}
	if !got[0] || !got[2] || got[3] || !got[4] {
		println("rules: want allowed, allowed, allowed, denied, allowed")
		return false
	}
	return true
}
