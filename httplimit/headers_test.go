package httplimit_test

import (
	"net/http"
	"testing"

	"github.com/diana-gw/diana/httplimit"
	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/rules"
)

// SetHeaders writes each header once, replacing what was there, and the values share one
// allocation without sharing space: adding to one header leaves the next one alone.
func TestSetHeaders(t *testing.T) {
	res := rules.Result{
		Allowed:  true,
		Rule:     &rules.Rule{Name: "r", Reply: rules.Reply{Headers: rules.Draft, Legacy: true}},
		Decision: algos.Decision{Limit: 10, Remaining: 3, ResetAfter: 2_000_000},
	}
	h := http.Header{"Ratelimit-Limit": {"stale"}}
	httplimit.SetHeaders(h, &res)
	want := http.Header{
		"Ratelimit-Limit": {"10"}, "Ratelimit-Remaining": {"3"}, "Ratelimit-Reset": {"2"},
		"X-Ratelimit-Limit": {"10"}, "X-Ratelimit-Remaining": {"3"},
	}
	for name, v := range want {
		if got := h.Values(name); len(got) != 1 || got[0] != v[0] {
			t.Errorf("%s: %q, want %q", name, got, v)
		}
	}
	h.Add("Ratelimit-Limit", "more")
	if got := h.Values("Ratelimit-Remaining"); len(got) != 1 || got[0] != "3" {
		t.Errorf("after adding to Ratelimit-Limit, Ratelimit-Remaining is %q", got)
	}
}
