package redisstore

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/rules"
)

// group is the ops of one call of Decide or DecideTogether, which a round trip keeps together and
// in order: independent decisions, or (together) the limits of one request, all or nothing.
type group struct {
	ops              []*rules.Op
	together, denied bool
}

// DecideTogether implements rules.Together: it decides ops, the limits of one request, all or
// nothing (algos.Together, the mixed script's groups), in one round trip shared with other
// callers' calls as Decide's are: on a standalone or Sentinel Redis, one script call with them.
// On a Redis Cluster, where a script's keys must share a slot, the keys of one request are in one
// call when they share a hash tag (a prefix that holds one: Options.Prefix); otherwise they are
// decided in two round trips, a dry run and a commit of one call per hash tag each, so that a
// request one slot refuses takes nothing in another (twoPhases). A request one of whose ops cannot
// be sent (an algorithm without a script, a release) gets an error on every op, and nothing is
// decided.
func (s *Store) DecideTogether(ctx context.Context, ops []*rules.Op, denied bool) {
	s.decide(ctx, group{ops: ops, together: true, denied: denied})
}

// apart reports whether ops's keys have more than one hash tag: on a Redis Cluster, they may be
// in several slots, which one script call cannot take.
func (s *Store) apart(ops []*rules.Op) bool {
	first := hashTag(s.stateKey(ops[0].Key))
	for _, op := range ops[1:] {
		if hashTag(s.stateKey(op.Key)) != first {
			return true
		}
	}
	return false
}

// twoPhases decides g, a request's limits whose keys are in several slots of a Redis Cluster,
// all or nothing across the slots, in two round trips of one script call per slot each: first
// every slot's part as if another limit had refused the request (each a dry run, but for the
// bans its denials start), then, if no part refused it, every part together again, which commits
// each part that still admits it. As with a dry run and a commit, only a request racing between
// the two may be refused in one slot after another slot's part took its units.
func (s *Store) twoPhases(ctx context.Context, g group) {
	s.send(ctx, []group{{ops: g.ops, together: true, denied: true}})
	var failed *rules.Op
	for _, op := range g.ops {
		if op.Err != nil {
			failed = op
			break
		}
	}
	if failed != nil {
		// Nothing is known of the request: its every op falls to its fail policy.
		for _, op := range g.ops {
			if op.Err == nil {
				op.Dec, op.Err, op.Req.DryRun = algos.Decision{}, fmt.Errorf("redisstore: %s on %q: not decided, as the request's limit on %q could not be: %w", scriptName(op), op.Key, failed.Key, failed.Err), true
			}
		}
		return
	}
	if g.denied {
		return
	}
	for _, op := range g.ops {
		if !op.Dec.Allowed && !op.Shadow {
			return
		}
	}
	s.send(ctx, []group{{ops: g.ops, together: true}})
}

// maxBatch is the most decisions one script call makes (a request's limits decided together
// may make more): Redis runs a script to its end before it serves anyone else, so a call of many
// decisions must not hold it for long (what a call costs Redis: docs/redis.md, "Tuning, as
// measured").
const maxBatch = 64

// command is one script call of a round trip: one independent decision by its algorithm's
// script, or several by the mixed script (scripts.Mixed), whose reply holds each one's.
type command struct {
	first, n   int // its decisions: sendBuf.cops[first : first+n], indexes of the round trip's evals
	pfirst, pn int // its groups, as the mixed script's layout gives them: sendBuf.parts[pfirst : pfirst+pn]
	keys       []string
	args       []any
	cmd        *redis.Cmd
	retried    bool // sent again with EVAL after NOSCRIPT
}

// part is a group of a mixed script call: n decisions, independent or decided together.
type part struct {
	n                int
	together, denied bool
}

// send decides the groups' ops in one round trip: one EVALSHA, or a pipeline of them, and EVAL
// for the commands that met NOSCRIPT. On a standalone or Sentinel Redis the ops go in one call of
// the mixed script (up to maxBatch a call): Redis then pays a script call's overhead and its
// clock once for them all, and they share its time. On a Cluster, where a script's keys must
// share a slot, in one call per hash tag. A call of one independent op is its algorithm's own
// script.
func (s *Store) send(ctx context.Context, gs []group) {
	if len(gs) == 1 && !gs[0].together && len(gs[0].ops) == 1 && s.o.WaitReplicas <= 0 {
		s.sendOne(ctx, gs[0].ops[0])
		return
	}
	buf := sendBufs.Get().(*sendBuf)
	defer buf.put()
	writes := s.prepare(buf, gs)
	buf.commands(gs, s.cluster)
	if len(buf.cmds) == 0 {
		return
	}
	p := s.c.Pipeline()
	for i := range buf.cmds {
		c := &buf.cmds[i]
		if c.single(buf) {
			c.keys, c.args = buf.evals[buf.cops[c.first]].single()
		} else {
			c.keys, c.args = buf.mixedArgs(c, gs)
		}
		c.cmd = s.script(c, buf).EvalSha(ctx, p, c.keys, c.args...)
	}
	var wait *redis.Cmd
	if writes {
		wait = s.wait(ctx, p)
	}
	// Each command carries its own error, except when the pipeline could not be sent at all (no
	// connection, or one whose AUTH failed: WRONGPASS, NOAUTH): then only Exec returns it.
	_, execErr := p.Exec(ctx)
	rewait, reexecErr := s.resend(ctx, buf, writes)
	for i := range buf.cmds {
		c := &buf.cmds[i]
		if c.retried {
			s.answerCall(c, buf, gs, reexecErr, rewait)
		} else {
			s.answerCall(c, buf, gs, execErr, wait)
		}
	}
}

// sendOne decides op alone, by its algorithm's script: there is no pipeline to fill and parse.
func (s *Store) sendOne(ctx context.Context, op *rules.Op) {
	op.Dec, op.Err = algos.Decision{}, nil
	e, err := s.eval(op.Key, op.Alg, op.Req)
	if err != nil {
		op.Err = err
		return
	}
	keys, args := e.single()
	d, at, err := s.decision(&e, op.Key, e.lua.single.Run(ctx, s.c, keys, args...), nil)
	answer(op, d, at, err)
}

// prepare builds the evals of gs's ops into buf, in order, each op's answer cleared or its error
// set when it cannot be sent (in a group decided together, every op's then), and reports whether
// any of them writes.
func (s *Store) prepare(buf *sendBuf, gs []group) (writes bool) {
	total := 0
	for _, g := range gs {
		total += len(g.ops)
	}
	buf.evals = slices.Grow(buf.evals[:0], total)[:total]
	buf.at = slices.Grow(buf.at[:0], total)[:total]
	i := 0
	for gi := range gs {
		g := &gs[gi]
		var failed *rules.Op
		for j, op := range g.ops {
			op.Dec, op.Err = algos.Decision{}, nil
			buf.at[i] = [2]int{gi, j}
			if buf.evals[i], op.Err = s.evalInto(&buf.packed, op.Key, op.Alg, op.Req, g.together); op.Err != nil && failed == nil {
				failed = op
			}
			writes = writes || op.Err == nil && (g.together || !op.Req.DryRun)
			i++
		}
		if g.together {
			for _, op := range g.ops {
				op.Req.DryRun = true // until the reply tells what was committed
				if failed != nil && op.Err == nil {
					op.Err = fmt.Errorf("redisstore: %s on %q: not decided, as the request's limit on %q cannot be: %w", scriptName(op), op.Key, failed.Key, failed.Err)
				}
			}
		}
	}
	return writes
}

// resend sends the commands that met NOSCRIPT again, with EVAL, in a pipeline of their own: they
// did not run, and EVAL runs them once with the script's source. It returns that pipeline's WAIT
// and the error of its Exec.
func (s *Store) resend(ctx context.Context, buf *sendBuf, writes bool) (wait *redis.Cmd, execErr error) {
	var retry redis.Pipeliner
	for i := range buf.cmds {
		c := &buf.cmds[i]
		if redis.HasErrorPrefix(c.cmd.Err(), "NOSCRIPT") {
			if retry == nil {
				retry = s.c.Pipeline()
			}
			c.cmd, c.retried = s.script(c, buf).Eval(ctx, retry, c.keys, c.args...), true
		}
	}
	if retry == nil {
		return nil, nil
	}
	if writes {
		wait = s.wait(ctx, retry)
	}
	_, execErr = retry.Exec(ctx)
	return wait, execErr
}

// answerCall answers c's decisions from its reply, or its pipeline's error unsent, and, when the
// pipeline waited for replicas (wait), fails the writes that did not reach enough of them.
func (s *Store) answerCall(c *command, buf *sendBuf, gs []group, unsent error, wait *redis.Cmd) {
	cops := buf.cops[c.first : c.first+c.n]
	if c.single(buf) {
		op := buf.op(gs, cops[0])
		d, at, err := s.decision(&buf.evals[cops[0]], op.Key, c.cmd, unsent)
		answer(op, d, at, err)
	} else {
		s.answerMixed(c, buf, gs, unsent)
	}
	if wait == nil {
		return
	}
	for _, j := range cops {
		if op := buf.op(gs, j); op.Err == nil && !op.Req.DryRun {
			if n, err := wait.Int64(); err != nil || n < int64(s.o.WaitReplicas) {
				op.Dec, op.Err = algos.Decision{}, fmt.Errorf("%w (%d of %d replicas, %v)", ErrNotReplicated, n, s.o.WaitReplicas, err)
			}
		}
	}
}

// script is what c runs: its one decision's script, or the mixed script.
func (s *Store) script(c *command, buf *sendBuf) *redis.Script {
	if c.single(buf) {
		return buf.evals[buf.cops[c.first]].lua.single
	}
	return s.mixed
}

// single reports whether c is one independent decision, which its algorithm's script makes.
func (c *command) single(buf *sendBuf) bool {
	return c.n == 1 && !buf.parts[c.pfirst].together
}

// wait adds WAIT to p when Options.WaitReplicas asks for it.
func (s *Store) wait(ctx context.Context, p redis.Pipeliner) *redis.Cmd {
	if s.o.WaitReplicas <= 0 {
		return nil
	}
	timeout := s.o.WaitTimeout
	if timeout <= 0 {
		timeout = 50 * time.Millisecond
	}
	return p.Do(ctx, "WAIT", s.o.WaitReplicas, timeout.Milliseconds())
}

// commands lays the decisions of gs that can be sent (those without an error) out in script
// calls, b.cmds: in order, in calls of at most maxBatch decisions, a group decided together whole
// in one; on a Cluster (byTag), in calls of one hash tag each.
func (b *sendBuf) commands(gs []group, byTag bool) {
	if !byTag {
		b.open()
		i := 0
		for _, g := range gs {
			b.idx = b.idx[:0]
			for j, op := range g.ops {
				if op.Err == nil {
					b.idx = append(b.idx, i+j)
				}
			}
			i += len(g.ops)
			if len(b.idx) > 0 && (!g.together || len(b.idx) == len(g.ops)) {
				b.place(b.idx, g.together, g.denied)
			}
		}
		if last := &b.cmds[len(b.cmds)-1]; last.n == 0 {
			b.cmds = b.cmds[:len(b.cmds)-1]
		}
		return
	}
	// By hash tag, in the order each tag first comes: a piece is an independent decision, or the
	// decisions of a group decided together that share a tag.
	type piece struct {
		idx              []int
		together, denied bool
	}
	var tags []string
	pieces := map[string][]piece{}
	i := 0
	for _, g := range gs {
		var own map[string]int // a together group's pieces by tag
		for j, op := range g.ops {
			if op.Err != nil {
				continue
			}
			tag := hashTag(b.evals[i+j].state)
			if _, seen := pieces[tag]; !seen {
				tags = append(tags, tag)
				pieces[tag] = nil
			}
			ps := pieces[tag]
			switch {
			case !g.together:
				ps = append(ps, piece{idx: []int{i + j}})
			case own[tag] > 0:
				ps[own[tag]-1].idx = append(ps[own[tag]-1].idx, i+j)
			default:
				if own == nil {
					own = map[string]int{}
				}
				ps = append(ps, piece{idx: []int{i + j}, together: true, denied: g.denied})
				own[tag] = len(ps)
			}
			pieces[tag] = ps
		}
		i += len(g.ops)
	}
	for _, tag := range tags {
		b.open()
		for _, p := range pieces[tag] {
			b.place(p.idx, p.together, p.denied)
		}
	}
}

// open starts a new script call.
func (b *sendBuf) open() {
	b.cmds = append(b.cmds, command{first: len(b.cops), pfirst: len(b.parts)})
}

// place adds the decisions idx (indexes of b.evals) to the last script call, or to a new one
// when they would make it more than maxBatch: as one group decided together, or as independent
// decisions.
func (b *sendBuf) place(idx []int, together, denied bool) {
	c := &b.cmds[len(b.cmds)-1]
	if together {
		if c.n > 0 && c.n+len(idx) > maxBatch {
			b.open()
			c = &b.cmds[len(b.cmds)-1]
		}
		b.parts = append(b.parts, part{n: len(idx), together: true, denied: denied})
		b.cops = append(b.cops, idx...)
		c.pn++
		c.n += len(idx)
		return
	}
	for _, i := range idx {
		if c.n >= maxBatch {
			b.open()
			c = &b.cmds[len(b.cmds)-1]
		}
		if c.pn == 0 || b.parts[len(b.parts)-1].together {
			b.parts = append(b.parts, part{})
			c.pn++
		}
		b.parts[len(b.parts)-1].n++
		b.cops = append(b.cops, i)
		c.n++
	}
}

// mixedArgs returns the keys and arguments of c's call of the mixed script: its layout, then
// each decision's (see scripts.Mixed).
func (b *sendBuf) mixedArgs(c *command, gs []group) ([]string, []any) {
	start := len(b.packed)
	cops := b.cops[c.first : c.first+c.n]
	k := 0
	for _, p := range b.parts[c.pfirst : c.pfirst+c.pn] {
		g := int64(p.n) * 4
		if p.together {
			g += 2
		}
		if p.denied {
			g++
		}
		b.packed = appendInts(b.packed, g)
		for _, i := range cops[k : k+p.n] {
			e := &b.evals[i]
			code := e.lua.index * 8
			if e.direct {
				code += 4
			}
			if e.banned {
				code += 2
			}
			if b.op(gs, i).Shadow {
				code++
			}
			b.packed = appendInts(b.packed, code)
		}
		k += p.n
	}
	layout := b.packed[start:len(b.packed):len(b.packed)]
	kstart, astart := len(b.keys), len(b.args)
	b.args = append(b.args, layout)
	for _, i := range cops {
		b.keys, b.args = b.evals[i].appendMixed(b.keys, b.args)
	}
	return b.keys[kstart:], b.args[astart:]
}

// answerMixed answers c's decisions from its reply (see scripts.Mixed and unpacker), and tells
// each op of a group decided together whether it was committed.
func (s *Store) answerMixed(c *command, b *sendBuf, gs []group, unsent error) {
	cops := b.cops[c.first : c.first+c.n]
	v, err := s.reply(c.cmd, unsent)
	packed, ok := v.(string)
	u := unpacker{s: packed}
	if err == nil {
		if n, isMap := u.header(); !ok || u.err != nil || isMap || n != len(cops) {
			err = fmt.Errorf("reply %q: want the MessagePack of %d replies", v, len(cops))
		}
	}
	if err != nil {
		for _, i := range cops {
			op := b.op(gs, i)
			op.Err = fmt.Errorf("redisstore: %s on %q: %w", b.evals[i].name, op.Key, err)
		}
		return
	}
	var res [8]int64
	for _, i := range cops {
		op, e := b.op(gs, i), &b.evals[i]
		n, failed := u.entry(&res)
		switch {
		case u.err != nil:
			op.Err = fmt.Errorf("redisstore: %s on %q: reply %q: %w", e.name, op.Key, packed, u.err)
		case failed != nil:
			op.Err = fmt.Errorf("redisstore: %s on %q: %w", e.name, op.Key, failed)
		default:
			d, at, err := decisionFrom(e, op.Key, &res, n)
			answer(op, d, at, err)
		}
	}
	k := 0
	for _, p := range b.parts[c.pfirst : c.pfirst+c.pn] {
		if p.together {
			b.committed(gs, cops[k:k+p.n], p.denied)
		}
		k += p.n
	}
}

// committed sets Req.DryRun on the ops idx of a group decided together to whether the script
// left each uncommitted: as algos.Together decides, every one when the request is admitted, else
// the denials, not a shadow's, that start a ban. A group with an error committed nothing.
func (b *sendBuf) committed(gs []group, idx []int, denied bool) {
	admit := !denied
	for _, i := range idx {
		op := b.op(gs, i)
		if op.Err != nil {
			return
		}
		if !op.Dec.Allowed && !op.Shadow {
			admit = false
		}
	}
	for _, i := range idx {
		op := b.op(gs, i)
		op.Req.DryRun = !(admit || !op.Shadow && !op.Dec.Allowed && b.evals[i].banned)
	}
}

// hashTag is the part of a key that Redis Cluster hashes to its slot: the first {...} that holds
// something, else the whole key.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// eval is one decision, ready to send.
type eval struct {
	name       string // the algorithm's script, for error messages
	lua        *lua   // its scripts
	state, ban string // the identity's keys (ban only when banned)
	banned     bool   // the algorithm bans: the script reads the ban key
	direct     bool   // the script writes its state itself (a sorted set, a whole script)
	packed     []byte // the integer arguments (see prelude.lua)
	id         string // the lease id, "" for none
	limit      int64  // the algorithm's limit and the request's cost, which a reply of the usual
	cost       int64  // answer leaves out (see decisionFrom)
}

// single is the keys and arguments of e's script.
func (e *eval) single() ([]string, []any) {
	keys := []string{e.state}
	if e.banned {
		keys = append(keys, e.ban) // the script reads the ban key only when it bans
	}
	args := []any{e.packed}
	if e.id != "" {
		args = append(args, e.id)
	}
	return keys, args
}

// appendMixed appends e's keys and arguments to a mixed script call's. Without a ban, the state
// key stands in for the ban key, which the script does not read then; a whole script takes
// neither the ban key nor the lease id.
func (e *eval) appendMixed(keys []string, args []any) ([]string, []any) {
	if e.lua.whole {
		return append(keys, e.state), append(args, e.packed)
	}
	id, ban := e.id, e.state
	if id == "" {
		id = "0"
	}
	if e.banned {
		ban = e.ban
	}
	return append(keys, e.state, ban), append(args, e.packed, id)
}

// sendBuf is a round trip's working memory, reused by later round trips: go-redis copies the
// keys and arguments into its commands, and send keeps nothing of it once it returns.
type sendBuf struct {
	evals []eval
	at    [][2]int // the evals' ops: the group and the op in it (not the op itself, which a
	// pooled buffer would make every caller's op escape to the heap)
	cmds   []command
	cops   []int  // the commands' decisions, indexes of evals
	parts  []part // the mixed script calls' groups
	idx    []int  // a group's decisions that can be sent
	keys   []string
	args   []any
	packed []byte // the evals' packed integers and the calls' layouts
}

// op is the op of eval i of the round trip of gs.
func (b *sendBuf) op(gs []group, i int) *rules.Op {
	at := b.at[i]
	return gs[at[0]].ops[at[1]]
}

// maxKept bounds the decisions of a sendBuf kept for reuse: a round trip of many does not keep
// its memory.
const maxKept = 4 * maxBatch

var sendBufs = sync.Pool{New: func() any { return new(sendBuf) }}

// put clears b, so that it holds no key or reply, and keeps it for reuse.
func (b *sendBuf) put() {
	if cap(b.evals) > maxKept {
		return
	}
	clear(b.evals)
	clear(b.cmds)
	clear(b.keys)
	clear(b.args)
	b.evals, b.at, b.cmds, b.keys, b.args, b.packed = b.evals[:0], b.at[:0], b.cmds[:0], b.keys[:0], b.args[:0], b.packed[:0]
	b.cops, b.parts, b.idx = b.cops[:0], b.parts[:0], b.idx[:0]
	sendBufs.Put(b)
}

// eval builds the decision that applies r to key under alg (see algos.Script).
func (s *Store) eval(key string, alg algos.Algorithm, r algos.Request) (eval, error) {
	var packed []byte
	return s.evalInto(&packed, key, alg, r, false)
}

// evalInto is eval, its packed integers appended to *packed (whose earlier bytes stay as they
// were: a new array when it grows). A decision of a group decided together (together) is never a
// dry run of its own: the mixed script decides what it writes.
func (s *Store) evalInto(packed *[]byte, key string, alg algos.Algorithm, r algos.Request, together bool) (eval, error) {
	r = r.Bounded()
	sc := alg.Script()
	l, ok := s.scripts[sc.Name]
	if !ok {
		return eval{}, fmt.Errorf("redisstore: algorithm %q has no Lua script", sc.Name)
	}
	now := int64(-1)
	if s.o.CallerClock {
		now = r.Now
	}
	flags := int64(0)
	if r.Partial {
		flags |= 1
	}
	if r.Release {
		flags |= 2
	}
	if sc.Log {
		flags |= 4
	}
	if together {
		if r.Release || r.Partial {
			return eval{}, fmt.Errorf("redisstore: %s on %q: a request decided together is neither a release nor a partial request", sc.Name, key)
		}
	} else if r.DryRun {
		if r.Release {
			return eval{}, fmt.Errorf("redisstore: %s on %q: Request.DryRun: a release cannot be a dry run", sc.Name, key)
		}
		flags |= 8
	}
	e := eval{name: sc.Name, lua: l, banned: sc.Ban != 0, direct: sc.Log || l.whole, limit: sc.Limit, cost: r.Cost}
	if r.Backdated {
		flags |= 16
	}
	start := len(*packed)
	*packed = appendInts(slices.Grow(*packed, 9*(6+len(sc.Args))), now, r.Cost, r.MaxWait, flags, sc.Ban, sc.Limit)
	*packed = appendInts(*packed, sc.Args...)
	e.packed = (*packed)[start:len(*packed):len(*packed)]
	if r.ID != 0 {
		e.id = strconv.FormatInt(r.ID, 10)
	}
	if e.banned {
		e.state, e.ban = s.Keys(key)
	} else {
		e.state = s.stateKey(key)
	}
	return e, nil
}
