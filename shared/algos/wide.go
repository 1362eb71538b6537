package algos

import "math/bits"

// Products of a count and a duration (a limit of 10^12 per year is 10^12 × 3.2·10^13 µs) do not
// fit the 53 bits in which a Lua number is an exact integer, so the algorithms never keep such a
// product: they keep counts and times apart, and where the arithmetic needs one it is divided at
// once, by mulDiv. Its Lua twin, muldiv in scripts/wide.lua, computes the same two integers
// with doubles (an estimate, then the exact remainder from 25-bit halves); both are exact for
// operands and quotient below 2^50, which is what MaxCount and MaxSpan keep every caller to.

// mulDiv returns ⌊a·b/c⌋ and a·b mod c, for 0 ≤ a, b and 0 < c. The algorithms call it only
// with a, b, c and the quotient below 2^50, where the Lua twin is exact too; beyond 2^63 the
// quotient saturates rather than panic (go-pdk and TinyGo have no recover).
func mulDiv(a, b, c int64) (q, r int64) {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return 1<<63 - 1, 0
	}
	uq, ur := bits.Div64(hi, lo, uint64(c))
	if uq >= 1<<63 {
		return 1<<63 - 1, 0
	}
	return int64(uq), int64(ur)
}

// mulDivCeil returns ⌈a·b/c⌉ under the conditions of mulDiv.
func mulDivCeil(a, b, c int64) int64 {
	q, r := mulDiv(a, b, c)
	return q + min(r, 1)
}

// span is a non-negative duration kept exactly as us + frac/den µs, 0 ≤ frac < den, where den
// is an algorithm's rate: a bucket's emission interval Period/Rate is rarely a whole number of
// µs, and at 10^12 per second it is far below one.
type span struct{ us, frac int64 }

// spanOf returns n·period/rate µs as a span over rate.
func spanOf(n, period, rate int64) span {
	q, r := mulDiv(n, period, rate)
	return span{q, r}
}

// add returns a + b, both over den.
func (a span) add(b span, den int64) span {
	a.us, a.frac = a.us+b.us, a.frac+b.frac
	if a.frac >= den {
		a.us, a.frac = a.us+1, a.frac-den
	}
	return a
}

// sub returns a − b, both over den; a ≥ b.
func (a span) sub(b span, den int64) span {
	a.us, a.frac = a.us-b.us, a.frac-b.frac
	if a.frac < 0 {
		a.us, a.frac = a.us-1, a.frac+den
	}
	return a
}

// less reports a < b.
func (a span) less(b span) bool { return a.us < b.us || a.us == b.us && a.frac < b.frac }

// ceil returns ⌈a⌉ µs.
func (a span) ceil() int64 { return a.us + min(a.frac, 1) }

// ceilOver returns ⌈a − b⌉ µs for a > b, without forming a − b: when a.frac < b.frac the borrow
// and the rounding up cancel.
func (a span) ceilOver(b span) int64 {
	if a.frac > b.frac {
		return a.us - b.us + 1
	}
	return a.us - b.us
}

// units returns ⌊a·rate/period⌋: how many units of period/rate µs a holds (a.us < 2^50).
func (a span) units(period, rate int64) int64 {
	q, r := mulDiv(a.us, rate, period)
	return q + (r+a.frac)/period
}
