package scripts

import (
	"context"
	"math/big"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/diana-gw/diana/internal/redistest"
)

// TestMulDivLua runs muldiv (wide.lua) inside a real redis-server on operands below 2^50, many
// of whose products pass 2^53, and checks it against math/big: the algorithms' Lua twins are
// only as exact as it is.
func TestMulDivLua(t *testing.T) {
	srv := redistest.Start(t)
	wide, err := files.ReadFile("wide.lua")
	if err != nil {
		t.Fatal(err)
	}
	// ARGV: triples a, b, c; the reply: q and r of each, as strings (%d keeps every digit).
	src := "local floor = math.floor\n" + string(wide) + `
local out = {}
for i = 1, #ARGV, 3 do
  local q, r = muldiv(tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]))
  out[#out + 1] = string.format('%d', q)
  out[#out + 1] = string.format('%d', r)
end
return out`
	rng := rand.New(rand.NewPCG(5, 6))
	const b50 = 1<<50 - 1
	// Products just past 2^53, quotients just below 2^50, and random operands of every size.
	triples := [][3]int64{{b50, b50, b50}, {b50, b50, b50 - 1}, {94906267, 94906267, 8}, {94906267, 94906267, 9}, {1 << 26, 1 << 27, 3}}
	for len(triples) < 50_000 {
		c := rng.Int64N(int64(1)<<rng.IntN(51)) + 1
		a := rng.Int64N(int64(1)<<rng.IntN(51) + 1)
		b := rng.Int64N(int64(1)<<rng.IntN(51) + 1)
		triples = append(triples, [3]int64{a, b, c})
	}
	// The quotient must stay below 2^50, as the algorithms keep it.
	triples = slices.DeleteFunc(triples, func(v [3]int64) bool {
		return new(big.Int).Quo(new(big.Int).Mul(big.NewInt(v[0]), big.NewInt(v[1])), big.NewInt(v[2])).Cmp(big.NewInt(b50)) > 0
	})
	ctx := context.Background()
	for start := 0; start < len(triples); start += 1000 {
		batch := triples[start:min(start+1000, len(triples))]
		var args []any
		for _, v := range batch {
			args = append(args, v[0], v[1], v[2])
		}
		res, err := srv.Client().Eval(ctx, src, nil, args...).StringSlice()
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range batch {
			q, r := new(big.Int).QuoRem(new(big.Int).Mul(big.NewInt(v[0]), big.NewInt(v[1])), big.NewInt(v[2]), new(big.Int))
			if res[2*i] != q.String() || res[2*i+1] != r.String() {
				t.Fatalf("muldiv(%d, %d, %d) = %s, %s in Lua, want %s, %s", v[0], v[1], v[2], res[2*i], res[2*i+1], q, r)
			}
		}
	}
	t.Logf("%d products checked, %s of them past 2^53", len(triples), strconv.Itoa(countPast(triples)))
}

func countPast(ts [][3]int64) int {
	n := 0
	for _, v := range ts {
		if new(big.Int).Mul(big.NewInt(v[0]), big.NewInt(v[1])).Cmp(big.NewInt(1<<53)) >= 0 {
			n++
		}
	}
	return n
}
