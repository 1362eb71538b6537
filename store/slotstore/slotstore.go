// Package slotstore keeps rule states in a key-value store whose keys can never be deleted and
// whose only atomic operation is a compare-and-swap on one key: proxy-wasm's shared data, one
// store per vm_id shared by every Envoy worker thread. It is the Envoy filter's local store,
// written against the Data interface so that it is tested in plain Go like the other stores.
//
// One key per client would grow Envoy's memory forever, so each rule owns a fixed number of slot
// keys, created when first written, and a client's identity is hashed into one of them with a
// keyed hash (SipHash-2-4 under a random key shared by the workers through the store, see
// LoadKey): without the key nobody can pick identities that share a slot. A slot holds up to
// Entries identities, each with its own algorithm state and expiry, and one overflow state:
//
//   - an entry is dropped only once it expires, when its state is at rest (the algorithm's TTL:
//     a fresh state would decide the same), so losing an entry never hands out fresh capacity;
//   - an identity that finds its slot full of live entries is decided on the slot's overflow
//     state, which every such identity shares: it is limited as one client together with them,
//     never more leniently than on its own;
//   - an identity that finds room while the overflow state is live starts from a copy of it (it
//     may have spent from it), otherwise from a fresh state;
//   - two identities with the same 64-bit hash share one state (probability about n²/2⁶⁵).
//
// So a client that controls N identities gets, per rule, at most what N clients would get from
// an exact store, and at most what Slots × (Entries + 1) clients would, however large N is; every
// identity on its own gets no more than the limit. Honest clients are limited together only when
// more than Slots × Entries identities are live at once in a rule (size Slots for that; the
// Overflowed callback counts each decision made on an overflow state).
//
// Memory is bounded at rules × Slots × SlotBytes(Entries) = 1 + (Entries + 1) × 56 bytes per
// vm_id, and grows with the slots in use (a slot is created when first written).
//
// States (states.go) keeps the states that no slot entry holds (adaptive's list of words) whole,
// one key per identity: only for rules whose dimensions configuration bounds.
package slotstore

import (
	"context"
	"encoding/binary"
	"errors"
	"strconv"
	"strings"

	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/rules"
)

// Data is the key-value store: proxy-wasm's shared data.
type Data interface {
	// Get returns the value of key and its CAS, or ErrNotFound.
	Get(key string) (value []byte, cas uint32, err error)
	// Set stores value if the key's CAS is still cas, else returns ErrCasMismatch. A key that
	// does not exist yet is created whatever cas is (Envoy's semantics: there is no atomic
	// create).
	Set(key string, value []byte, cas uint32) error
}

var (
	ErrNotFound    = errors.New("shared data: no such key")
	ErrCasMismatch = errors.New("shared data: CAS mismatch")
	// ErrContended is an op's error when its retries ran out: the request is denied (an
	// admission that cannot be stored would be free).
	ErrContended = errors.New("shared data: the slot changed under every retry")
)

// Store decides rule ops in Data. Its fields are set once, before the first Decide. It is not
// safe for concurrent use: each Envoy worker is a single-threaded VM with a Store of its own, and
// the workers meet only in Data.
type Store struct {
	Data    Data
	Now     func() int64 // µs
	Key     [2]uint64    // the hash key, from LoadKey
	Slots   int          // slot keys per rule
	Entries int          // identities one slot holds besides its overflow state
	Retries int          // attempts of get → decide → set before ErrContended

	// Contended and Overflowed, when set, are called for each op whose retries ran out and each
	// decided on an overflow state.
	Contended, Overflowed func()

	buf   []byte               // the slot being written, reused
	keys  map[string]*ruleKeys // by rule name: building a key per decision would allocate
	peeks peeks                // the slots dry runs read, for the commits the Engine makes next
}

// slotRead is a value as Data.Get returned it.
type slotRead struct {
	key string
	val []byte
	cas uint32
}

// peeks are the values dry runs read, kept for the commits that the Engine makes next.
type peeks []slotRead

// maxPeeks bounds the dry runs' reads kept: a request's rules.
const maxPeeks = 8

// get reads key from d. The reads of dry runs are kept for the commits that the Engine makes
// next, which take them instead of reading again: a stale one only costs a CAS mismatch and a
// read.
func (ps *peeks) get(d Data, key string, dry bool) (val []byte, cas uint32, peeked bool, err error) {
	for i, p := range *ps {
		if p.key == key {
			*ps = append((*ps)[:i], (*ps)[i+1:]...)
			if !dry {
				return p.val, p.cas, true, nil
			}
		}
	}
	val, cas, err = d.Get(key)
	if dry && err == nil {
		if len(*ps) == maxPeeks {
			*ps = append((*ps)[:0], (*ps)[1:]...)
		}
		*ps = append(*ps, slotRead{key, val, cas})
	}
	return val, cas, false, err
}

// ruleKeys are a rule's slot keys, made as first used.
type ruleKeys struct {
	alg  string // the algorithm's name, part of the keys
	keys []string
}

// slotKey returns SlotKey(rule, alg, s.Slots, slot), from the cache.
func (s *Store) slotKey(rule string, alg algos.Algorithm, slot int) string {
	rk, name := s.keys[rule], algos.StateOf(alg).Script().Name
	if rk == nil || rk.alg != name {
		if s.keys == nil {
			s.keys = map[string]*ruleKeys{}
		}
		rk = &ruleKeys{alg: name, keys: make([]string, s.Slots)}
		s.keys[rule] = rk
	}
	if rk.keys[slot] == "" {
		rk.keys[slot] = SlotKey(rule, alg, s.Slots, slot)
	}
	return rk.keys[slot]
}

// entrySize is one state in a slot: hash, expiry, the four state words and the ban.
const entrySize = 8 + 8 + 4*8 + 8

// SlotBytes is the most bytes a slot of entries entries holds.
func SlotBytes(entries int) int { return 1 + (entries+1)*entrySize }

// version is the first byte of every slot value, and part of every key: a change of layout
// starts on new keys. Version 2: entry 0 is the overflow state.
const version = 2

// SlotKey returns the Data key of a rule's slot. It names the rule, its algorithm (the one whose
// state alg reads: algos.StateOf, so that a settlement finds its rule's state) and the slot count, so a config that changes them starts on fresh keys (old keys linger: another reason to
// keep slot counts stable).
func SlotKey(rule string, alg algos.Algorithm, slots, slot int) string {
	return "diana/" + strconv.Itoa(version) + "/" + rule + "/" + algos.StateOf(alg).Script().Name + "/" +
		strconv.Itoa(slots) + "/" + strconv.Itoa(slot)
}

// Hash is the keyed hash of an op's key; its slot is Hash % Slots.
func (s *Store) Hash(key string) uint64 { return sipHash(s.Key[0], s.Key[1], key) }

// Decide implements rules.Store: get the slot → decide → set with the CAS read, retried on a
// mismatch up to Retries times. A dry run only reads.
func (s *Store) Decide(_ context.Context, ops []*rules.Op) {
	for _, op := range ops {
		s.decide(op)
	}
}

func (s *Store) decide(op *rules.Op) {
	sum := s.Hash(op.Key)
	if sum == overflowSum {
		sum++ // 0 marks the overflow state
	}
	rule, _, _ := strings.Cut(op.Key, "|")
	c := cas{data: s.Data, peeks: &s.peeks, key: s.slotKey(rule, op.Alg, int(sum%uint64(s.Slots))),
		retries: s.Retries, contended: s.Contended, now: s.Now, fresh: empty, slots: true}
	req := op.Req.Bounded()
	for c.next(op, &req) {
		val, now := c.val, req.Now
		at, full := place(val, sum, s.Entries, now)
		from := at // the state decided on: the identity's, else the overflow state (entry 0)
		if at < 0 {
			from = 0 // a new entry starts from the live overflow state, which it may have spent from
			if full {
				at = 0
				if s.Overflowed != nil {
					s.Overflowed()
				}
			}
		}
		var st algos.State
		if expiry(val, from) > now {
			read(val, from, &st)
		}
		before := st
		op.Dec = op.Alg.Decide(&st, req)
		if req.DryRun || st.W == before.W && st.Ban == before.Ban {
			return // nothing to store (a denial, a peek): no write, no contention
		}
		if c.store(op, s.write(val, at, sum, now, now+op.Dec.TTL, &st)) {
			return
		}
	}
}

// cas is one op's get → decide → set on a Data key with the CAS read, retried on a mismatch:
//
//	for c.next(op, &req) { decide on c.val at req.Now; if nothing to store or c.store(op, b) { return } }
//
// A missing key (or, with slots, a value that is no slot: only garbage, keys name the layout's
// version) is first set to fresh with a CAS no key holds, which Envoy takes for a create (a
// missing key is stored whatever the CAS) and refuses as a mismatch when another worker created
// the key meanwhile: decisions are only ever stored by a CAS on an existing key, so two workers
// creating it at once cannot overwrite each other's. A lost race reads and decides again; when
// the retries run out, op is denied (an admission that cannot be stored would be free) with
// ErrContended. A Data error other than a mismatch is op's error, the decision left to its fail
// policy. (A loop, not a callback: TinyGo would allocate a closure per decision.)
type cas struct {
	data      Data
	peeks     *peeks // dry runs' reads, kept for the commits that follow
	key       string
	retries   int    // attempts before ErrContended
	contended func() // called when they run out, if set
	now       func() int64
	fresh     []byte // a new key's value
	slots     bool   // a value that is not a slot (garbage) is replaced with fresh

	val     []byte // the value read for this attempt
	casRead uint32 // its CAS
	peeked  bool   // it is a dry run's read
	attempt int    // attempts lost to other workers
	created bool
}

// next reads the key's value into c.val and sets req.Now for an attempt to decide; false when
// op is decided without one (its retries ran out, or Data failed).
func (c *cas) next(op *rules.Op, req *algos.Request) bool {
	for {
		if c.attempt >= c.retries {
			if c.contended != nil {
				c.contended()
			}
			op.Dec = algos.Decision{Limit: op.Dec.Limit, ResetAfter: op.Dec.ResetAfter}
			op.Err = ErrContended
			return false
		}
		val, casRead, peeked, err := c.peeks.get(c.data, c.key, req.DryRun && c.attempt == 0)
		if errors.Is(err, ErrNotFound) || err == nil && c.slots && !valid(val) {
			with := uint32(createCAS)
			if err == nil {
				with = casRead
			}
			if err = c.data.Set(c.key, c.fresh, with); err == nil || errors.Is(err, ErrCasMismatch) {
				if c.created { // the first creation is no lost race
					c.attempt++
				}
				c.created = true
				continue
			}
		}
		if err != nil {
			op.Dec, op.Err = algos.Decision{Allowed: true}, err
			return false
		}
		c.val, c.casRead, c.peeked = val, casRead, peeked
		req.Now = c.now()
		return true
	}
}

// store writes b with the CAS read: true when op is done (stored, or Data failed: op.Err), false
// when a race was lost and the caller decides again.
func (c *cas) store(op *rules.Op, b []byte) bool {
	err := c.data.Set(c.key, b, c.casRead)
	if err == nil {
		return true
	}
	if !errors.Is(err, ErrCasMismatch) {
		op.Err = err
		return true
	}
	if !c.peeked { // a dry run's stale read is no lost race
		c.attempt++
	}
	return false
}

// createCAS is the CAS a slot is created with: Envoy's CAS values count up from 1, so no key
// holds this one until 2³² writes have wrapped the count around to it.
const createCAS = 1<<32 - 1

// overflowSum is the hash field of the overflow state.
const overflowSum = 0

// empty is a new slot: the version and an overflow state at rest.
var empty = appendEntry([]byte{version}, overflowSum, 0, &algos.State{})

// valid tells whether val is a slot of this layout: the version, the overflow state, entries.
func valid(val []byte) bool {
	return len(val) >= 1+entrySize && val[0] == version && (len(val)-1)%entrySize == 0
}

// place finds the entry of the identity of hash sum in the slot val at now: at > 0, or -1 when
// it has none; full tells whether Entries entries are live then (the overflow state at 0 is
// not one of them), leaving no room for a new one.
func place(val []byte, sum uint64, entries int, now int64) (at int, full bool) {
	live := 0
	for i := 1; i < len(val)/entrySize; i++ {
		if binary.LittleEndian.Uint64(val[1+i*entrySize:]) == sum {
			return i, false
		}
		if expiry(val, i) > now {
			live++
		}
	}
	return -1, live >= entries
}

// write returns the slot val at now with the state st, expiring at exp, stored at entry at
// (0: the overflow state; −1: a new entry for the identity of hash sum), and without the
// entries expired by now.
func (s *Store) write(val []byte, at int, sum uint64, now, exp int64, st *algos.State) []byte {
	b := append(s.buf[:0], version)
	if at == 0 {
		b = appendEntry(b, overflowSum, exp, st)
	} else {
		b = append(b, val[1:1+entrySize]...)
	}
	for i := 1; i < len(val)/entrySize; i++ {
		if i != at && expiry(val, i) > now {
			b = append(b, val[1+i*entrySize:1+(i+1)*entrySize]...)
		}
	}
	if at != 0 {
		b = appendEntry(b, sum, exp, st)
	}
	s.buf = b
	return b
}

func expiry(val []byte, i int) int64 {
	return int64(binary.LittleEndian.Uint64(val[1+i*entrySize+8:]))
}

func read(val []byte, i int, st *algos.State) {
	e := val[1+i*entrySize+16:]
	for w := range st.W {
		st.W[w] = int64(binary.LittleEndian.Uint64(e[w*8:]))
	}
	st.Ban = int64(binary.LittleEndian.Uint64(e[32:]))
}

func appendEntry(b []byte, sum uint64, exp int64, st *algos.State) []byte {
	b = binary.LittleEndian.AppendUint64(b, sum)
	b = binary.LittleEndian.AppendUint64(b, uint64(exp))
	for _, w := range st.W {
		b = binary.LittleEndian.AppendUint64(b, uint64(w))
	}
	return binary.LittleEndian.AppendUint64(b, uint64(st.Ban))
}
