package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/algos/scripts"
	"github.com/diana-gw/diana/shared/rules"
)

// WriteBackLife is how long Redis keeps a write-back's marker: retries of the write-back within
// it are not charged again.
const WriteBackLife = time.Hour

// Back is one write-back: Op's units (Op.Req.Cost) charged to Op.Key under Op.Alg once per
// Marker, as a request Ago µs before Redis's time (with Options.CallerClock: at Op.Req.Now − Ago).
type Back struct {
	Op     *rules.Op
	Marker string
	Ago    int64
}

// WriteBack charges each write-back's units to its key in Redis once per marker
// (scripts.WriteBack), in one pipeline: the units a node admitted on its own while Redis could
// not be reached, written back when it returns (store/failover). Each is applied as a partial
// request (as many of its units as the state still holds, never a denial for lack of them)
// without a wait, a dry run or a release, and never starts a ban (it books requests already
// answered: an algorithm under a ban is written back as the algorithm alone). Its op gets the
// decision and a nil Err; a zero Decision and a nil Err when the marker says it was written
// back before; or its error.
func (s *Store) WriteBack(ctx context.Context, backs []Back) {
	type sent struct {
		script *redis.Script
		e      eval
		keys   []string
		args   []any
		cmd    *redis.Cmd
	}
	all := make([]sent, len(backs))
	p := s.c.Pipeline()
	n := 0
	for i, b := range backs {
		op := b.Op
		op.Dec, op.Err = algos.Decision{}, nil
		r := op.Req
		r.Partial, r.DryRun, r.Release, r.MaxWait, r.ID = true, false, false, 0, 0
		ago := max(b.Ago, 0)
		r.Now -= ago
		alg := op.Alg
		if b, ok := alg.(interface{ Inner() algos.Algorithm }); ok {
			alg = b.Inner()
		}
		e, err := s.eval(op.Key, alg, r)
		if err != nil {
			op.Err = err
			continue
		}
		ban := e.ban
		if !e.banned {
			ban = e.state
		}
		script, err := s.writeBack(e.name)
		if err != nil {
			op.Err = err
			continue
		}
		all[i] = sent{script: script, e: e, keys: []string{e.state, ban, e.state + ":wb:" + b.Marker},
			args: []any{e.packed, "0", WriteBackLife.Milliseconds(), ago}}
		all[i].cmd = all[i].script.EvalSha(ctx, p, all[i].keys, all[i].args...)
		n++
	}
	if n == 0 {
		return
	}
	_, execErr := p.Exec(ctx)
	var retry redis.Pipeliner
	for i := range all {
		if c := &all[i]; c.cmd != nil && redis.HasErrorPrefix(c.cmd.Err(), "NOSCRIPT") {
			if retry == nil {
				retry = s.c.Pipeline()
			}
			c.cmd = c.script.Eval(ctx, retry, c.keys, c.args...)
		}
	}
	if retry != nil {
		_, execErr = retry.Exec(ctx)
	}
	for i, b := range backs {
		c := &all[i]
		if c.cmd == nil {
			continue
		}
		if c.cmd.Err() == redis.Nil { // false: written back before
			continue
		}
		v, err := s.reply(c.cmd, execErr)
		c.e.name += " write-back"
		d, _, err := decisionOf(&c.e, b.Op.Key, v, err)
		b.Op.Dec, b.Op.Err = d, err
	}
}

// writeBack returns the write-back script of the algorithm name, made once.
func (s *Store) writeBack(name string) (*redis.Script, error) {
	s.wbMu.Lock()
	defer s.wbMu.Unlock()
	if sc := s.writeBacks[name]; sc != nil {
		return sc, nil
	}
	src, err := scripts.WriteBack(name)
	if err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	if s.writeBacks == nil {
		s.writeBacks = map[string]*redis.Script{}
	}
	sc := redis.NewScript(src)
	s.writeBacks[name] = sc
	return sc, nil
}
