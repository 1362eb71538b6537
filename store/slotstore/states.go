package slotstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"strconv"

	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/rules"
)

// States decides the ops of algorithms whose state is a list (algos.State.Log: adaptive, whose
// state is 114 words), which no fixed-size slot entry holds: each state is kept whole
// under a Data key of its own, one per op key, read → decided → written back with a
// compare-and-swap, retried on a mismatch as Store does.
//
// Data keys can never be deleted, so a key per identity is safe only for rules whose
// dimensions are bounded by configuration: global, or Envoy's route names (from the route
// table, never from clients). A caller must refuse every other dimension for these rules. A
// request without a dimension's value, which rules count by its client address (rules'
// "%ip:ADDR"), is counted with every other such request instead (rules.WithoutClient), so that
// no request can add a key. Memory is then bounded at the rules × their dimension values ×
// StateBytes of their states per vm_id.
//
// A value is the version byte, the state's expiry (µs; the decision's TTL after its last
// write), its W words, Ban and Log words, as little-endian int64s. A value of another version
// or length (corrupt, or written by something else) or an expired one is a fresh state.
type States struct {
	Data    Data
	Now     func() int64 // µs
	Retries int          // attempts of get → decide → set before ErrContended (releases: at least ReleaseRetries)
	// Contended, when set, is called for each op whose retries ran out.
	Contended func()

	buf   []byte            // the value being written, reused
	st    algos.State       // the state being decided, its Log reused
	keys  map[string]string // Data keys by op key: building one per decision would allocate
	peeks peeks             // the values dry runs read, for the commits the Engine makes next
}

// ReleaseRetries is the fewest attempts a release gets. A lost admission is a denial, but a lost
// release keeps its slot taken until the state idles for its TTL (adaptive: probe_every), which
// a busy rule never does: releases are retried longer.
const ReleaseRetries = 64

// statesVersion is the first byte of every value, and part of every key: a change of layout
// starts on new keys.
const statesVersion = 1

// stateHeader is the bytes before the Log words: version, expiry, W and Ban.
const stateHeader = 1 + 8 + 4*8 + 8

// maxLogWords bounds the Log a value may hold (a longer one is corrupt): adaptive's is 114
// words; concurrency's, which the filter does not keep here, could reach 30,000.
const maxLogWords = 1 << 12

// StateBytes is the size of the value of a state whose Log holds words words.
func StateBytes(words int) int { return stateHeader + 8*words }

// StateKey returns the Data key of the state of op key key under the algorithm alg: the
// version, the algorithm (a rule that changes algorithm starts afresh) and the key, whose
// client-address parts are replaced (rules.WithoutClient).
func StateKey(alg algos.Algorithm, key string) string {
	return "diana/a/" + strconv.Itoa(statesVersion) + "/" + alg.Script().Name + "/" + rules.WithoutClient(key)
}

// Decide implements rules.Store: get the state → decide → set with the CAS read, retried on a
// mismatch up to Retries times. A dry run only reads (and its read serves the commit that
// follows, as Store's do); a decision that leaves the state as it was (a denial) writes nothing.
func (s *States) Decide(_ context.Context, ops []*rules.Op) {
	for _, op := range ops {
		s.decide(op)
	}
}

func (s *States) decide(op *rules.Op) {
	c := cas{data: s.Data, peeks: &s.peeks, key: s.dataKey(op), retries: s.Retries,
		contended: s.Contended, now: s.Now, fresh: restState}
	req := op.Req.Bounded()
	if req.Release {
		c.retries = max(c.retries, ReleaseRetries)
	}
	for c.next(op, &req) {
		s.read(c.val, req.Now)
		op.Dec = op.Alg.Decide(&s.st, req)
		if req.DryRun {
			return
		}
		b := s.write(req.Now+op.Dec.TTL, &s.st)
		if validState(c.val) && stateExpiry(c.val) > req.Now && bytes.Equal(b[9:], c.val[9:]) {
			return // unchanged: no write, no contention
		}
		if c.store(op, b) {
			return
		}
	}
}

// dataKey returns StateKey(op.Alg, op.Key), from a cache keyed by the op key without its
// client-address parts: as bounded as the Data keys.
func (s *States) dataKey(op *rules.Op) string {
	key := rules.WithoutClient(op.Key)
	if k, ok := s.keys[key]; ok {
		return k
	}
	if s.keys == nil {
		s.keys = map[string]string{}
	}
	k := StateKey(op.Alg, key)
	s.keys[key] = k
	return k
}

// restState is a new key's value: a state that has expired, which reads as fresh.
var restState = func() []byte {
	b := make([]byte, stateHeader)
	b[0] = statesVersion
	return b
}()

// validState tells whether val is a state of this layout.
func validState(val []byte) bool {
	return len(val) >= stateHeader && val[0] == statesVersion &&
		(len(val)-stateHeader)%8 == 0 && (len(val)-stateHeader)/8 <= maxLogWords
}

func stateExpiry(val []byte) int64 { return int64(binary.LittleEndian.Uint64(val[1:])) }

// read sets s.st to the state val holds at now: fresh when val is invalid or expired.
func (s *States) read(val []byte, now int64) {
	st := &s.st
	st.W, st.Ban, st.Log = [4]int64{}, 0, st.Log[:0]
	if !validState(val) || stateExpiry(val) <= now {
		return
	}
	for i := range st.W {
		st.W[i] = int64(binary.LittleEndian.Uint64(val[9+8*i:]))
	}
	st.Ban = int64(binary.LittleEndian.Uint64(val[9+32:]))
	for i := stateHeader; i < len(val); i += 8 {
		st.Log = append(st.Log, int64(binary.LittleEndian.Uint64(val[i:])))
	}
}

// write returns the value of st expiring at exp.
func (s *States) write(exp int64, st *algos.State) []byte {
	b := append(s.buf[:0], statesVersion)
	b = binary.LittleEndian.AppendUint64(b, uint64(exp))
	for _, w := range st.W {
		b = binary.LittleEndian.AppendUint64(b, uint64(w))
	}
	b = binary.LittleEndian.AppendUint64(b, uint64(st.Ban))
	for _, w := range st.Log {
		b = binary.LittleEndian.AppendUint64(b, uint64(w))
	}
	s.buf = b
	return b
}
