package bench

import (
	"context"
	"testing"
	"fmt"

	"github.com/diana-gw/diana/internal/redistest"
)

func BenchmarkXPDiana(b *testing.B) {
	srv := redistest.Start(b)
	c := srv.Client()
	k := keys()
	ctx := context.Background()
	for _, g := range []int{1, 16} {
		b.Run(fmt.Sprintf("g=%d", g), func(b *testing.B) {
			decide := dianaRedis(c, gcra(b))
			decide(ctx, "warm")
			b.ResetTimer()
			concurrently(g, b.N, func(j int) {
				if _, err := decide(ctx, k[j*7919%len(k)]); err != nil {
					b.Error(err)
				}
			})
		})
	}
}
