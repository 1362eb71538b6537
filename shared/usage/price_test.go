package usage_test

import (
	"math/big"
	"testing"

	"github.com/diana-gw/diana/shared/usage"
)

func TestParseRate(t *testing.T) {
	for _, c := range []struct {
		in   string
		want usage.Rate
		ok   bool
	}{
		{"1", usage.RateScale, true},
		{"0", 0, true},
		{"2.50", 2_500_000_000_000, true},
		{"0.000001", 1_000_000, true},
		{"1000000", 1_000_000 * usage.RateScale, true},
		{"1000000.000001", 0, false},
		{"1000001", 0, false},
		{"0.0000001", 0, false},
		{"-1", 0, false},
		{"1e3", 0, false},
		{".5", 0, false},
		{"1.", 0, false},
	} {
		got, err := usage.ParseRate(c.in)
		if (err == nil) != c.ok || c.ok && got != c.want {
			t.Errorf("ParseRate(%q) = %d, %v", c.in, got, err)
		}
		if c.ok {
			if back, _ := usage.ParseRate(got.String()); back != got {
				t.Errorf("%q: String %q reads back as %d", c.in, got.String(), back)
			}
		}
	}
}

// TestCost checks Rates.Cost against exact rational arithmetic, at the extremes too.
func TestCost(t *testing.T) {
	gpt4o := usage.Rates{2_500_000_000_000, 1_250_000_000_000, 2_500_000_000_000, 2_500_000_000_000, 10 * usage.RateScale, 10 * usage.RateScale}
	for _, c := range []struct {
		r usage.Rates
		t usage.Tokens
	}{
		{usage.UnitRates, usage.Tokens{1, 2, 3, 4, 5, 6}},
		{gpt4o, usage.Tokens{1000, 0, 0, 500, 0}},
		{gpt4o, usage.Tokens{1, 1, 0, 0, 0}},
		{usage.Rates{1}, usage.Tokens{1}},
		{usage.Rates{usage.RateScale / 10}, usage.Tokens{15}},
		{usage.Rates{1_000_000 * usage.RateScale}, usage.Tokens{999_999_999}},
		{usage.Rates{1_000_000 * usage.RateScale, 1_000_000 * usage.RateScale}, usage.Tokens{usage.MaxValue, usage.MaxValue}},
		{usage.UnitRates, usage.Tokens{usage.MaxValue, usage.MaxValue, usage.MaxValue, usage.MaxValue, usage.MaxValue, usage.MaxValue}},
	} {
		exact := new(big.Int)
		for i := range c.t {
			exact.Add(exact, new(big.Int).Mul(big.NewInt(c.t[i]), big.NewInt(int64(c.r[i]))))
		}
		q, rem := new(big.Int).QuoRem(exact, big.NewInt(int64(usage.RateScale)), new(big.Int))
		if rem.Sign() > 0 {
			q.Add(q, big.NewInt(1))
		}
		want, ok := q.Int64(), q.IsInt64() && q.Int64() <= usage.MaxValue
		if !ok {
			want = usage.MaxValue
		}
		got, gotOK := c.r.Cost(c.t)
		if got != want || gotOK != ok {
			t.Errorf("%v at %v: (%d, %v), want (%d, %v)", c.t, c.r, got, gotOK, want, ok)
		}
	}
}
