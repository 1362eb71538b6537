package redisstore

import (
	"context"

	"github.com/diana-gw/diana/shared/rules"
)

// decideAll decides calls as Decide does, for the tests that build their ops as values.
func (s *Store) decideAll(ctx context.Context, calls []rules.Op) {
	ops := make([]*rules.Op, len(calls))
	for i := range calls {
		ops[i] = &calls[i]
	}
	s.Decide(ctx, ops)
}
