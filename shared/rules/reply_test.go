package rules_test

import (
	"context"
	"reflect"
	"testing"

	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/memstore"
)

// TestHeaderStyles pins the exact header lines of each reply.headers style, for a request that
// passes and for the one the limit refuses (a fixed window of 2 per minute, 10 s into it).
func TestHeaderStyles(t *testing.T) {
	type h = rules.Header
	for _, c := range []struct {
		reply, window   string
		allowed, denied []rules.Header
	}{
		{`{}`, "1m",
			[]h{{"Ratelimit-Limit", "2"}, {"Ratelimit-Remaining", "1"}, {"Ratelimit-Reset", "50"}},
			[]h{{"Ratelimit-Limit", "2"}, {"Ratelimit-Remaining", "0"}, {"Ratelimit-Reset", "50"}, {"Retry-After", "50"}}},
		{`{"headers": true, "legacy_headers": true}`, "1m",
			[]h{{"Ratelimit-Limit", "2"}, {"Ratelimit-Remaining", "1"}, {"Ratelimit-Reset", "50"}, {"X-Ratelimit-Limit", "2"}, {"X-Ratelimit-Remaining", "1"}},
			[]h{{"Ratelimit-Limit", "2"}, {"Ratelimit-Remaining", "0"}, {"Ratelimit-Reset", "50"}, {"X-Ratelimit-Limit", "2"}, {"X-Ratelimit-Remaining", "0"}, {"Retry-After", "50"}}},
		{`{"headers": "kong"}`, "1m",
			[]h{{"Ratelimit-Limit", "2"}, {"Ratelimit-Remaining", "1"}, {"Ratelimit-Reset", "50"}, {"X-Ratelimit-Limit-Minute", "2"}, {"X-Ratelimit-Remaining-Minute", "1"}},
			[]h{{"Ratelimit-Limit", "2"}, {"Ratelimit-Remaining", "0"}, {"Ratelimit-Reset", "50"}, {"X-Ratelimit-Limit-Minute", "2"}, {"X-Ratelimit-Remaining-Minute", "0"}, {"Retry-After", "50"}}},
		{`{"headers": "kong"}`, "90s", // not one of Kong's windows: named by its length
			[]h{{"Ratelimit-Limit", "2"}, {"Ratelimit-Remaining", "1"}, {"Ratelimit-Reset", "80"}, {"X-Ratelimit-Limit-90s", "2"}, {"X-Ratelimit-Remaining-90s", "1"}},
			[]h{{"Ratelimit-Limit", "2"}, {"Ratelimit-Remaining", "0"}, {"Ratelimit-Reset", "80"}, {"X-Ratelimit-Limit-90s", "2"}, {"X-Ratelimit-Remaining-90s", "0"}, {"Retry-After", "80"}}},
		{`{"headers": "structured"}`, "1m",
			[]h{{"Ratelimit-Policy", `"r";q=2;w=60`}, {"Ratelimit", `"r";r=1;t=50`}},
			[]h{{"Ratelimit-Policy", `"r";q=2;w=60`}, {"Ratelimit", `"r";r=0;t=50`}, {"Retry-After", "50"}}},
		{`{"headers": "envoy"}`, "1m",
			[]h{{"X-Ratelimit-Limit", "2, 2;w=60"}, {"X-Ratelimit-Remaining", "1"}, {"X-Ratelimit-Reset", "50"}},
			[]h{{"X-Ratelimit-Limit", "2, 2;w=60"}, {"X-Ratelimit-Remaining", "0"}, {"X-Ratelimit-Reset", "50"}, {"Retry-After", "50"}}},
		{`{"headers": "none"}`, "1m", nil, nil},
		{`{"headers": false, "legacy_headers": true}`, "1m", nil, nil},
	} {
		t.Run(c.reply+" "+c.window, func(t *testing.T) {
			r := mustRule(t, `{"name": "r", "reply": `+c.reply+`, "limit": {"algorithm": "fixed_window", "limit": 2, "window": "`+c.window+`"}}`)
			now := int64(1_000_000) * algos.Minute * 3 / 2 * 2 // a multiple of 1m and 90s
			now += 10 * algos.Second
			mem := memstore.New(memstore.Options{Clock: func() int64 { return now }})
			e, err := rules.New([]*rules.Rule{r}, rules.Options{Local: rules.Each(mem.Decide)})
			if err != nil {
				t.Fatal(err)
			}
			for i, want := range [][]rules.Header{c.allowed, nil, c.denied} {
				res := e.Check(context.Background(), &rules.Input{Path: "/"})
				got := res.AppendHeaders(nil)
				if i == 1 {
					continue // the second request takes the last unit
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("request %d:\n got  %v\n want %v", i+1, got, want)
				}
			}
		})
	}
}
