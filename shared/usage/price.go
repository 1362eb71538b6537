package usage

import (
	"errors"
	"math/bits"
	"strconv"
	"strings"
)

// A Rate is what one token of a class costs, in millionths of a millionth (10^-12) of a cost
// unit: a weight of 1 is 10^12. A price written per million tokens in some currency, as providers
// publish theirs, is the same number per token in millionths of that currency: a budget in
// micro-dollars takes prices in dollars per million tokens as they are. Rates are exact for
// decimals of up to 6 places.
type Rate int64

// RateScale is the Rate of one cost unit per token.
const RateScale Rate = 1_000_000_000_000

// MaxRateUnits bounds a rate: a million cost units per token.
const MaxRateUnits = 1_000_000

// Rates are the rates of each class.
type Rates [NumClasses]Rate

// UnitRates count every token as one unit: the cost is the total of tokens.
var UnitRates = Rates{RateScale, RateScale, RateScale, RateScale, RateScale, RateScale}

// Cost returns what t costs at r: Σ t[c] × r[c], in cost units, rounded up, and false when it is
// above MaxValue. The sum is exact (128-bit): no rounding but the last.
func (r *Rates) Cost(t Tokens) (int64, bool) {
	var hi, lo uint64
	for c, n := range t {
		h, l := bits.Mul64(uint64(n), uint64(r[c]))
		var carry uint64
		lo, carry = bits.Add64(lo, l, 0)
		hi += h + carry
	}
	const scale = uint64(RateScale)
	if hi >= scale { // the quotient would not fit 64 bits
		return MaxValue, false
	}
	q, rem := bits.Div64(hi, lo, scale)
	if rem > 0 {
		q++
	}
	if q > uint64(MaxValue) {
		return MaxValue, false
	}
	return int64(q), true
}

// ParseRate reads a rate written as a decimal number of cost units per token, non-negative, with
// at most 6 decimal places and at most MaxRateUnits.
func ParseRate(s string) (Rate, error) {
	whole, frac, dot := strings.Cut(s, ".")
	if whole == "" || dot && frac == "" || strings.Trim(whole+frac, "0123456789") != "" {
		return 0, errors.New("must be a decimal number such as 0.5 or 2.50, got " + strconv.Quote(s))
	}
	if len(frac) > 6 {
		return 0, errors.New("has more than 6 decimal places: " + s)
	}
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || w > MaxRateUnits || w == MaxRateUnits && strings.Trim(frac, "0") != "" {
		return 0, errors.New("must be at most " + strconv.Itoa(MaxRateUnits) + ", got " + s)
	}
	f, _ := strconv.ParseInt((frac + "000000000000")[:12], 10, 64)
	return Rate(w)*RateScale + Rate(f), nil
}

// String writes r as ParseRate reads it.
func (r Rate) String() string {
	s := strconv.FormatInt(int64(r/RateScale), 10)
	if f := int64(r % RateScale); f != 0 {
		s += "." + strings.TrimRight(strconv.FormatInt(f+int64(RateScale), 10)[1:], "0")
	}
	return s
}
