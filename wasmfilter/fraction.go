package main

import (
	"strconv"

	"github.com/diana-gw/diana/shared/conf"
)

// million is the denominator of a fraction: parts per million, Envoy's finest.
const million = 1_000_000

// denominators are Envoy's FractionalPercent denominators, in parts per million per unit.
var denominators = [...]struct {
	name string
	ppm  int64
}{{"HUNDRED", 10_000}, {"TEN_THOUSAND", 100}, {"MILLION", 1}}

// decodeFraction reads key as Envoy's RuntimeFractionalPercent, the form of local_ratelimit's
// filter_enabled and filter_enforced: {"default_value": {"numerator": N, "denominator":
// "HUNDRED" | "TEN_THOUSAND" | "MILLION"}}; absent, 100%. It returns parts per million.
// runtime_key is refused: the filter has no Envoy runtime to read it from, and a fraction the
// operator believes they can change at run time would not change.
func decodeFraction(o *conf.Obj, key string) int64 {
	if !o.Has(key) {
		return million
	}
	f := o.Obj(key)
	f.Refuse("runtime_key", "is not supported: the filter cannot read Envoy's runtime, so the fraction is default_value alone (change it by updating the filter's configuration)")
	f.Require("default_value")
	d := f.Obj("default_value")
	names := make([]string, len(denominators))
	for i, x := range denominators {
		names[i] = x.name
	}
	per := denominators[d.EnumIndex("denominator", names...)].ppm
	d.Require("numerator") // Envoy would read a missing one as 0: the filter off, silently
	n := d.Int("numerator", 0, 0, million/per)
	d.Done()
	f.Done()
	return n * per
}

// percent writes parts per million as a percentage, for log lines.
func percent(ppm int64) string {
	return strconv.FormatFloat(float64(ppm)/10_000, 'f', -1, 64) + "%"
}

// sampler draws fractions of requests: xorshift64*, seeded from the host's randomness, so that
// which requests a fraction takes cannot be predicted from outside.
type sampler struct{ x uint64 }

// take reports whether this request falls in a fraction of ppm parts per million.
func (s *sampler) take(ppm int64) bool {
	if ppm >= million {
		return true
	}
	if ppm <= 0 {
		return false
	}
	s.x ^= s.x >> 12
	s.x ^= s.x << 25
	s.x ^= s.x >> 27
	return int64((s.x*2685821657736338717)>>32%million) < ppm
}
