package main

import (
	"fmt"
	"strings"
	"testing"
)

func TestDecodeFraction(t *testing.T) {
	for _, tc := range []struct {
		frac string
		want int64
	}{
		{``, million},
		{`, "filter_enabled": {"default_value": {"numerator": 25}}`, 250_000}, // HUNDRED, Envoy's default
		{`, "filter_enabled": {"default_value": {"numerator": 25, "denominator": "HUNDRED"}}`, 250_000},
		{`, "filter_enabled": {"default_value": {"numerator": 1, "denominator": "TEN_THOUSAND"}}`, 100},
		{`, "filter_enabled": {"default_value": {"numerator": 1000000, "denominator": "MILLION"}}`, million},
		{`, "filter_enabled": {"default_value": {"numerator": 0}}`, 0},
	} {
		c, err := parseConfig([]byte(`{"rules": [{"name": "r", "limit": {"algorithm": "fixed_window", "limit": 3, "window": "1m"}}]` + tc.frac + `}`))
		if err != nil || c.enabled != tc.want || c.enforced != million {
			t.Errorf("%s: enabled %d enforced %d (%v), want %d and %d", tc.frac, c.enabled, c.enforced, err, tc.want, million)
		}
	}
}

// The sampler takes a fraction's share of requests, within a few standard deviations.
func TestSampler(t *testing.T) {
	for _, ppm := range []int64{0, 100, 10_000, 250_000, 500_000, 999_000, million} {
		s := sampler{x: 0x9e3779b97f4a7c15}
		const n = 200_000
		took := 0
		for range n {
			if s.take(ppm) {
				took++
			}
		}
		want := float64(n) * float64(ppm) / million
		if d := float64(took) - want; d*d > 25*want*(1-float64(ppm)/million)+1 { // 5 σ
			t.Errorf("%d ppm: took %d of %d, want about %.0f", ppm, took, n, want)
		}
	}
}

// filter_enabled: the requests left out pass undecided and uncounted by the rules, counted in
// diana.not_enabled and logged; filter_enforced: the denials left out pass, counted as shadow
// denials and in diana.not_enforced. In Go and compiled.
func TestFilterFractions(t *testing.T) {
	frac := func(key string, pct int) string {
		return fmt.Sprintf(`, %q: {"default_value": {"numerator": %d, "denominator": "HUNDRED"}}`, key, pct)
	}
	cfg := func(extra string) string {
		return `{"rules": [{"name": "r", "limit": {"algorithm": "fixed_window", "limit": 10, "window": "1h"}}]` + extra + `}`
	}
	const n = 400
	for _, rn := range runners {
		t.Run(rn.name, func(t *testing.T) {
			for _, tc := range []struct {
				name                 string
				extra                string
				notEnabled, denied   [2]uint64 // bounds
				notEnforced, limited bool
			}{
				{"enabled 0%", frac("filter_enabled", 0), [2]uint64{n, n}, [2]uint64{0, 0}, false, false},
				{"enabled 50%", frac("filter_enabled", 50), [2]uint64{n/2 - 50, n/2 + 50}, [2]uint64{n/2 - 60, n/2 + 50}, false, true},
				{"enforced 0%", frac("filter_enforced", 0), [2]uint64{0, 0}, [2]uint64{0, 0}, true, false},
				{"enforced 50%", frac("filter_enforced", 50), [2]uint64{0, 0}, [2]uint64{(n-10)/2 - 50, (n-10)/2 + 50}, true, true},
				{"both 100%", frac("filter_enabled", 100) + frac("filter_enforced", 100), [2]uint64{0, 0}, [2]uint64{n - 10, n - 10}, false, true},
			} {
				t.Run(tc.name, func(t *testing.T) {
					warn := warnings(t)
					e := start(t, rn.vm(t), cfg(tc.extra))
					for range n {
						e.request("/")
					}
					ne, d := e.counter(metricNotEnabled), e.counter(metricDenied)
					if ne < tc.notEnabled[0] || ne > tc.notEnabled[1] || d < tc.denied[0] || d > tc.denied[1] {
						t.Errorf("%s: not_enabled %d, denied %d; want %v and %v", tc.name, ne, d, tc.notEnabled, tc.denied)
					}
					if a := e.counter(metricAllowed); a+d != n {
						t.Errorf("%s: allowed %d + denied %d != %d requests", tc.name, a, d, n)
					}
					if ns, sd := e.counter(metricNotEnforced), e.counter(metricShadowDenied); (ns > 0) != tc.notEnforced || ns != sd || (ne == 0 && ns+d != n-10) {
						t.Errorf("%s: not_enforced %d, shadow_denied %d, denied %d", tc.name, ns, sd, d)
					}
					logs := strings.Join(warn(), "\n")
					if tc.notEnabled[1] > 0 && !strings.Contains(logs, "filter_enabled is") {
						t.Errorf("%s: no log of the requests let through undecided: %q", tc.name, logs)
					}
					if tc.notEnforced && !strings.Contains(logs, "(not enforced: filter_enforced") {
						t.Errorf("%s: no log of the denials not enforced: %q", tc.name, logs)
					}
				})
			}
		})
	}
}
