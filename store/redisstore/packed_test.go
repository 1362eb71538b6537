package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/diana-gw/diana/internal/redistest"
)

// TestUnpackRedis: what Redis's cmsgpack packs, unpacker reads back. Each round has Redis pack
// an array of up to 70 entries, as a batch script's reply: arrays of 1 to 8 random integers of
// every size that a Lua number holds exactly (below 2^53 in magnitude), and error entries.
func TestUnpackRedis(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client()
	ctx := context.Background()
	pack := redis.NewScript(`local out = {}
for i, e in ipairs(cjson.decode(ARGV[1])) do
  if type(e) == 'string' then out[i] = {err = e} else out[i] = e end
end
return cmsgpack.pack(out)`)
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 300 {
		var entries []any
		for range 1 + rng.IntN(70) {
			if rng.IntN(10) == 0 {
				entries = append(entries, "ERR "+strings.Repeat("x", rng.IntN(300)))
				continue
			}
			ints := make([]int64, 1+rng.IntN(8))
			for j := range ints {
				ints[j] = rng.Int64N(1<<53) >> rng.IntN(53)
				if rng.IntN(3) == 0 {
					ints[j] = -ints[j]
				}
			}
			entries = append(entries, ints)
		}
		doc, _ := json.Marshal(entries)
		packed, err := pack.Run(ctx, c, nil, doc).Text()
		if err != nil {
			t.Fatal(err)
		}
		u := unpacker{s: packed}
		if n, isMap := u.header(); u.err != nil || isMap || n != len(entries) {
			t.Fatalf("round %d: header %d, %v, %v; want an array of %d", round, n, isMap, u.err, len(entries))
		}
		var res [8]int64
		for i, e := range entries {
			n, failed := u.entry(&res)
			if u.err != nil {
				t.Fatalf("round %d entry %d: %v", round, i, u.err)
			}
			if msg, ok := e.(string); ok {
				var re redis.Error
				if !errors.As(failed, &re) || failed.Error() != msg {
					t.Fatalf("round %d entry %d: %v, want the error reply %q", round, i, failed, msg)
				}
				continue
			}
			if want := e.([]int64); failed != nil || !slices.Equal(res[:n], want) {
				t.Fatalf("round %d entry %d: %v %v, want %v", round, i, res[:n], failed, want)
			}
		}
		if u.s != "" {
			t.Fatalf("round %d: %d bytes left", round, len(u.s))
		}
	}
}

// TestUnpackBad: a reply that is not a batch reply's packing is an error, never a decision or a
// panic: truncated, a float, a nested array, more than 8 integers, an uint64 above int64, a map
// that is not {err = ...}.
func TestUnpackBad(t *testing.T) {
	for _, c := range []struct{ name, packed string }{
		{"empty", ""},
		{"truncated int 64", "\x91\x97\xd3\x00\x00"},
		{"truncated array", "\x92\x97\x01\x02\x03\x04\x05\x06\x07"},
		{"float", "\x91\x97\xcb\x3f\xf0\x00\x00\x00\x00\x00\x00\x01\x02\x03\x04\x05\x06"},
		{"nested", "\x91\x97\x91\x01\x02\x03\x04\x05\x06\x07"},
		{"9 integers", "\x91\x99\x01\x02\x03\x04\x05\x06\x07\x08\x09"},
		{"uint64 above int64", "\x91\x97\xcf\xff\xff\xff\xff\xff\xff\xff\xff\x01\x02\x03\x04\x05\x06"},
		{"map of 2", "\x91\x82\xa3err\xa1x\xa1y\xa1z"},
		{"map without err", "\x91\x81\xa3foo\xa1x"},
		{"string too long", "\x91\x81\xa3err\xd9\x10x"},
	} {
		t.Run(c.name, func(t *testing.T) {
			u := unpacker{s: c.packed}
			n, isMap := u.header()
			var res [8]int64
			for range n {
				u.entry(&res)
			}
			if u.err == nil && !isMap && n > 0 {
				t.Errorf("%q read without an error", c.packed)
			}
		})
	}
}

// FuzzUnpack: any reply is read to its end or to an error, without a panic.
func FuzzUnpack(f *testing.F) {
	f.Add("\x92\x97\x01\x02\x03\x04\x05\x06\x07\x81\xa3err\xa1x")
	f.Add("\xdc\x00\x01\x98\xd3\x00\x00\x00\x00\x00\x00\x00\x01\xd0\xff\xd1\x80\x00\xd2\x80\x00\x00\x00\xcc\xff\xcd\xff\xff\xce\xff\xff\xff\xff\xcf\x7f\xff\xff\xff\xff\xff\xff\xff")
	f.Fuzz(func(t *testing.T, packed string) {
		u := unpacker{s: packed}
		n, _ := u.header()
		var res [8]int64
		for i := 0; i < n && u.err == nil; i++ {
			u.entry(&res)
		}
	})
}
