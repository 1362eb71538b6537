package batch

import (
	"context"
	"fmt"
	"slices"

	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/rules"
)

// taking is what a request decided together took of a key's held units, to give them back if the
// request is refused: the units of each grant, and the pool's life and epoch then.
type taking struct {
	p            *pool
	until, epoch int64
	from         []grant
}

// units is how many units t took.
func (t *taking) units() int64 {
	n := int64(0)
	for _, g := range t.from {
		n += g.units
	}
	return n
}

// DecideTogether implements rules.Together for the store behind it (which must implement it):
// the ops of batched rules are decided from the units this node holds, taken at once and given
// back to the node if the request is refused, or from a remembered refusal; those whose key has
// no units ask for a batch first, in a round trip of their own (with the refunds waiting), as
// Decide does. The others go to the store behind, together, told whether a batched rule refused
// the request. If a batch cannot be asked for or the store behind fails, no op is decided: each
// gets an error (every unit taken goes back), for the caller's fail policy.
func (s *Store) DecideTogether(ctx context.Context, ops []*rules.Op, denied bool) {
	s.DecideTogetherHeld(ctx, ops, denied)
}

// DecideTogetherHeld is DecideTogether, and returns how many ops it answered from what the node
// holds, without a round trip (see DecideHeld).
func (s *Store) DecideTogetherHeld(ctx context.Context, ops []*rules.Op, denied bool) (held int) {
	next, ok := s.next.(rules.Together)
	if !ok {
		err := fmt.Errorf("batch: the store behind (%T) cannot decide a request's limits together", s.next)
		for _, op := range ops {
			op.Dec, op.Err, op.Req.DryRun = algos.Decision{}, err, true
		}
		return 0
	}
	if !slices.ContainsFunc(ops, batched) {
		next.DecideTogether(ctx, ops, denied)
		s.stats.direct.Add(int64(len(ops)))
		return 0
	}
	// What becomes of each op: the store behind decides it (with the batched ops decided exactly,
	// as another request of this node asks for their key's batch), or the node does from its
	// units, asking for a batch first where it holds none.
	const (
		behind = iota
		exact
		fromUnits
	)
	kind := make([]uint8, len(ops))
	took := make([]taking, len(ops))
	own := make([]rules.Op, len(ops)) // a batched op's ask for a batch, or its exact decision
	var asks []int
	for i, op := range ops {
		op.Dec, op.Err = algos.Decision{}, nil
		if !batched(op) {
			continue
		}
		op.Req.DryRun = false // its units are taken now, and given back if the request is refused
		want, local := s.local(op, &took[i])
		switch {
		case local:
			kind[i] = fromUnits
			held++
		case want > 0:
			kind[i] = fromUnits
			own[i] = rules.Op{Key: op.Key, Alg: op.Batch.Batching.Alg, Req: algos.Request{Now: op.Req.Now, Cost: want, Partial: true}}
			asks = append(asks, i)
		default:
			kind[i] = exact
			own[i] = rules.Op{Key: op.Key, Alg: op.Batch.Batching.Alg, Req: op.Req, Shadow: op.Shadow}
		}
	}
	var failed error
	restSent := false // the ops the store behind decides went to it
	if len(asks) > 0 {
		send := make([]*rules.Op, len(asks))
		for j, i := range asks {
			send[j] = &own[i]
		}
		t0, e0 := s.now(), s.epoch.Load()
		send = s.sendWithRefunds(ctx, send)
		for j, i := range asks {
			op := ops[i]
			op.Dec, op.Err = send[j].Dec, send[j].Err
			s.granted(op, send[j], t0, e0, &took[i])
			if op.Err != nil && failed == nil {
				failed = op.Err
			}
		}
	}
	if failed == nil {
		refused := denied
		var rest []*rules.Op
		for i, op := range ops {
			switch kind[i] {
			case behind:
				rest = append(rest, op)
			case exact:
				rest = append(rest, &own[i])
			default:
				refused = refused || !op.Shadow && !op.Dec.Allowed
			}
		}
		if len(rest) > 0 {
			restSent = true
			next.DecideTogether(ctx, rest, refused)
			s.stats.direct.Add(int64(len(rest)))
		}
		for i, op := range ops {
			if kind[i] == exact {
				op.Dec, op.Err, op.Req.DryRun = own[i].Dec, own[i].Err, own[i].Req.DryRun
				if op.Err == nil {
					op.Dec.Limit = op.Alg.Script().Limit // decided directly with the batch algorithm
				}
			}
			if op.Err != nil && failed == nil {
				failed = op.Err
			}
		}
	}
	admit := !denied && failed == nil
	for _, op := range ops {
		if !op.Dec.Allowed && !op.Shadow {
			admit = false
		}
	}
	for i, op := range ops {
		if kind[i] != fromUnits {
			continue
		}
		if t := &took[i]; t.p != nil && !admit {
			s.giveBack(op.Key, t)
		}
		op.Req.DryRun = !admit
	}
	if failed != nil {
		// The units taken went back: those ops fall to their fail policies with the ones Redis
		// did not decide, and so do the ops never sent. An op Redis decided (on a Cluster, in
		// another slot's call) keeps its decision.
		for i, op := range ops {
			if op.Err == nil && (kind[i] == fromUnits || !restSent) {
				op.Dec, op.Err, op.Req.DryRun = algos.Decision{}, fmt.Errorf("batch: not decided, as another limit of the request could not be: %w", failed), true
			}
		}
		return 0
	}
	return held
}

// giveBack puts the units t took of key's pool back, unless the pool has gone meanwhile (the
// units are then lost, as units that expire unspent are). They keep the life they had: units
// whose life ended meanwhile go as expired ones do, back to Redis where they can.
func (s *Store) giveBack(key string, t *taking) {
	n := t.units()
	sh := s.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	s.stats.spent.Add(-n)
	p := sh.pools[key]
	if p != t.p || p.epoch != t.epoch {
		s.stats.expired.Add(n)
		return
	}
	now := s.now()
	if p.units > 0 {
		p.until = min(p.until, t.until)
	} else {
		p.until = t.until
	}
	p.units += n
	p.spent -= n
	p.held = append(slices.Clone(t.from), p.held...) // they were the oldest
	s.expire(p, now)
}
