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
	// Each op's way, what a batched op took of its key's units, and the op the store behind
	// decides for a batched op (the ask for its batch, or its exact decision), by op. Slices
	// rather than a struct of them: one whose address escaped would take all of them to the heap.
	way := make([]uint8, len(ops))
	took := make([]taking, len(ops))
	own := make([]rules.Op, len(ops))
	held, asks := s.plan(ops, way, took, own)
	var failed error
	if asks > 0 {
		failed = s.askBatches(ctx, ops, way, took, own, asks)
	}
	restSent := false // the ops the store behind decides went to it
	if failed == nil {
		restSent, failed = s.decideRest(ctx, next, ops, way, own, denied)
	}
	s.keepOrGiveBack(ops, way, took, !denied && failed == nil)
	if failed != nil {
		// The units taken went back: those ops fall to their fail policies with the ones Redis
		// did not decide, and so do the ops never sent. An op Redis decided (on a Cluster, in
		// another slot's call) keeps its decision.
		for i, op := range ops {
			if op.Err == nil && (way[i] >= fromUnits || !restSent) {
				op.Dec, op.Err, op.Req.DryRun = algos.Decision{}, fmt.Errorf("batch: not decided, as another limit of the request could not be: %w", failed), true
			}
		}
		return 0
	}
	return held
}

// The ways an op of a request decided together is decided.
const (
	behind    = iota // by the store behind
	exact            // by the store behind, exactly: another request of this node asks for the key's batch
	fromUnits        // by the node, from the units it holds, taken at once
	askFirst         // by the node, from the units of the batch it asks for first
)

// plan sets the way of each op, taking at once the units of the ops the node answers from what
// it holds, and returns how many those are and how many ops ask for a batch first.
func (s *Store) plan(ops []*rules.Op, way []uint8, took []taking, own []rules.Op) (held, asks int) {
	for i, op := range ops {
		op.Dec, op.Err = algos.Decision{}, nil
		if !batched(op) {
			continue
		}
		op.Req.DryRun = false // its units are taken now, and given back if the request is refused
		want, local := s.local(op, &took[i])
		switch {
		case local:
			way[i] = fromUnits
			held++
		case want > 0:
			way[i] = askFirst
			own[i] = rules.Op{Key: op.Key, Alg: op.Batch.Batching.Alg, Req: algos.Request{Now: op.Req.Now, Cost: want, Partial: true}}
			asks++
		default:
			way[i] = exact
			own[i] = rules.Op{Key: op.Key, Alg: op.Batch.Batching.Alg, Req: op.Req, Shadow: op.Shadow}
		}
	}
	return held, asks
}

// askBatches asks for the batches of the asks askFirst ops in one round trip (with the refunds
// waiting), decides those ops from the units granted, and returns the first error.
func (s *Store) askBatches(ctx context.Context, ops []*rules.Op, way []uint8, took []taking, own []rules.Op, asks int) (failed error) {
	send := make([]*rules.Op, 0, asks)
	for i := range ops {
		if way[i] == askFirst {
			send = append(send, &own[i])
		}
	}
	t0, e0 := s.now(), s.epoch.Load()
	send = s.sendWithRefunds(ctx, send)
	j := 0
	for i, op := range ops {
		if way[i] != askFirst {
			continue
		}
		op.Dec, op.Err = send[j].Dec, send[j].Err
		s.granted(op, send[j], t0, e0, &took[i])
		if op.Err != nil && failed == nil {
			failed = op.Err
		}
		j++
	}
	return failed
}

// decideRest sends the ops the store behind decides to next, together, told whether the request
// is refused already (denied, or by a batched op's units), reports whether any went, and
// returns the first error among ops.
func (s *Store) decideRest(ctx context.Context, next rules.Together, ops []*rules.Op, way []uint8, own []rules.Op, denied bool) (sent bool, failed error) {
	refused := denied
	var rest []*rules.Op
	for i, op := range ops {
		switch way[i] {
		case behind:
			rest = append(rest, op)
		case exact:
			rest = append(rest, &own[i])
		default:
			refused = refused || !op.Shadow && !op.Dec.Allowed
		}
	}
	if len(rest) > 0 {
		sent = true
		next.DecideTogether(ctx, rest, refused)
		s.stats.direct.Add(int64(len(rest)))
	}
	for i, op := range ops {
		if way[i] == exact {
			op.Dec, op.Err, op.Req.DryRun = own[i].Dec, own[i].Err, own[i].Req.DryRun
			if op.Err == nil {
				op.Dec.Limit = op.Alg.Script().Limit // decided directly with the batch algorithm
			}
		}
		if op.Err != nil && failed == nil {
			failed = op.Err
		}
	}
	return sent, failed
}

// keepOrGiveBack keeps the units the ops decided by the node took if the request is admitted
// (admit, and no op denies it but a shadow), else gives them back; each such op's DryRun says
// which.
func (s *Store) keepOrGiveBack(ops []*rules.Op, way []uint8, took []taking, admit bool) {
	for _, op := range ops {
		if !op.Dec.Allowed && !op.Shadow {
			admit = false
		}
	}
	for i, op := range ops {
		if way[i] < fromUnits {
			continue
		}
		if t := &took[i]; t.p != nil && !admit {
			s.giveBack(op.Key, t)
		}
		op.Req.DryRun = !admit
	}
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
