package algos

import (
	"math/big"
	"math/rand/v2"
	"testing"
)

// TestMulDiv checks mulDiv against math/big on the operands the algorithms use (below 2^50) and
// at the edges of the 53 bits a Lua number holds exactly; scripts/wide_test.go checks the Lua
// twin on the same kind of operands.
func TestMulDiv(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	check := func(a, b, c int64) {
		t.Helper()
		q, r := new(big.Int).QuoRem(new(big.Int).Mul(big.NewInt(a), big.NewInt(b)), big.NewInt(c), new(big.Int))
		if !q.IsInt64() || q.Int64() >= 1<<63-1 {
			return // saturates; the algorithms never ask
		}
		if gq, gr := mulDiv(a, b, c); gq != q.Int64() || gr != r.Int64() {
			t.Fatalf("mulDiv(%d, %d, %d) = %d, %d, want %s, %s", a, b, c, gq, gr, q, r)
		}
		if got, want := mulDivCeil(a, b, c), q.Int64()+int64(r.Sign()); got != want {
			t.Fatalf("mulDivCeil(%d, %d, %d) = %d, want %d", a, b, c, got, want)
		}
	}
	const b50 = 1<<50 - 1
	for _, v := range [][3]int64{
		{0, 0, 1}, {1, 1, 1}, {b50, b50, b50}, {b50, 1 << 3, 1}, {1 << 26, 1 << 27, 3},
		{MaxCount, MaxSpan, Year}, {MaxCount, MaxSpan, MaxCount - 1}, {94906267, 94906267, 1},
	} {
		check(v[0], v[1], v[2])
	}
	for range 200_000 {
		c := rng.Int64N(int64(1)<<rng.IntN(51)) + 1
		a := rng.Int64N(int64(1)<<rng.IntN(51) + 1)
		b := rng.Int64N(int64(1)<<rng.IntN(51) + 1)
		check(a, b, c)
	}
	if q, _ := mulDiv(1<<62, 1<<62, 1); q != 1<<63-1 {
		t.Fatalf("an overflowing quotient gave %d, want saturation", q)
	}
}

func TestSpan(t *testing.T) {
	const rate = 7
	a, b := span{10, 3}, span{4, 5}
	if got := a.add(b, rate); got != (span{15, 1}) {
		t.Fatalf("add: %+v", got)
	}
	if got := a.sub(b, rate); got != (span{5, 5}) {
		t.Fatalf("sub: %+v", got)
	}
	// ⌈a − b⌉ = ⌈5 + 5/7⌉ = 6; ⌈b′ − a′⌉ without a borrow.
	if got := a.ceilOver(b); got != 6 {
		t.Fatalf("ceilOver with a borrow: %d", got)
	}
	if got := (span{10, 5}).ceilOver(span{4, 3}); got != 7 {
		t.Fatalf("ceilOver: %d", got)
	}
	if got := (span{10, 5}).ceilOver(span{4, 5}); got != 6 {
		t.Fatalf("ceilOver, equal fractions: %d", got)
	}
	// 10 + 3/7 µs at 7 units per 3 µs: ⌊(10·7 + 3)/3⌋ = 24 units.
	if got := a.units(3, rate); got != 24 {
		t.Fatalf("units: %d", got)
	}
	if !b.less(a) || a.less(b) || a.less(a) {
		t.Fatal("less")
	}
}
