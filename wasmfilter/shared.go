package main

import (
	"context"
	"encoding/binary"
	"errors"
	"strconv"

	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm"
	"github.com/tetratelabs/proxy-wasm-go-sdk/proxywasm/types"
)

// sharedData is the part of proxy-wasm's shared data the store uses: one key-value store per
// vm_id, shared by every Envoy worker thread, with compare-and-swap. Tests wrap it to inject
// CAS mismatches, which the SDK's emulator never produces on its own.
type sharedData interface {
	Get(key string) (value []byte, cas uint32, err error)
	Set(key string, value []byte, cas uint32) error // types.ErrorStatusCasMismatch on a lost race
}

// hostData is the host's shared data.
type hostData struct{}

func (hostData) Get(key string) ([]byte, uint32, error) { return proxywasm.GetSharedData(key) }
func (hostData) Set(key string, v []byte, cas uint32) error {
	return proxywasm.SetSharedData(key, v, cas)
}

// slotStore keeps the rules' states in shared data. Shared-data keys can never be deleted, so
// one key per client would grow Envoy's memory forever; instead each rule owns a fixed number
// of slot keys, and a client's identity is hashed (64-bit FNV-1a) into one of them. A slot is a
// small table of up to `entries` identities, each with its algorithm state and expiry:
//
//   - identities sharing a slot keep separate states (matched by the full 64-bit hash), but
//     share its CAS: they contend on one key, so a busy slot retries more;
//   - an entry whose TTL has passed decides as a fresh state and is dropped when the slot is
//     written; when a slot is full, the entry that expires first is evicted, and that
//     identity starts afresh (the trade-off: more than slots × entries identities active within
//     a TTL are limited leniently, never wrongly denied);
//   - two identities with the same 64-bit hash share one state (probability about n²/2⁶⁵).
//
// Memory is bounded at rules × slots × (1 + entries × 56) bytes per vm_id.
type slotStore struct {
	data    sharedData
	now     func() int64 // µs
	slots   int
	entries int
	retries int
	// exhausted is called when an op's retries ran out: the op is then decided on the last
	// state read, without storing it (the request is neither lost nor double-counted in a
	// way that matters: it took no units).
	exhausted func()

	buf []byte // the slot being written, reused
}

// entrySize is one identity in a slot: hash, expiry, the four state words and the ban.
const entrySize = 8 + 8 + 4*8 + 8

// slotVersion is the first byte of every slot value: a change of layout changes the key too.
const slotVersion = 1

var errNoSlot = errors.New("shared data: slot value has a bad layout")

// slotKey returns the shared-data key of a rule's slot. The key names the rule, its algorithm
// and the slot count, so a config that changes them starts on fresh keys (old keys linger:
// another reason to keep slot counts stable).
func slotKey(rule string, alg algos.Algorithm, slots, slot int) string {
	return "diana/" + strconv.Itoa(slotVersion) + "/" + rule + "/" + alg.Script().Name + "/" +
		strconv.Itoa(slots) + "/" + strconv.Itoa(slot)
}

// precreate creates every slot key of the rules that is missing. A missing key is created by a
// Set whatever the cas, so two workers could both create it; creating them all at start leaves
// only existing keys, whose CAS is checked, to the request path.
func (s *slotStore) precreate(rs []*rules.Rule) error {
	empty := []byte{slotVersion}
	for _, r := range rs {
		for i := 0; i < s.slots; i++ {
			key := slotKey(r.Name, r.Alg, s.slots, i)
			_, _, err := s.data.Get(key)
			if err == nil {
				continue
			}
			if !errors.Is(err, types.ErrorStatusNotFound) {
				return errors.New("shared data: reading " + key + ": " + err.Error())
			}
			if err := s.data.Set(key, empty, 0); err != nil && !errors.Is(err, types.ErrorStatusCasMismatch) {
				return errors.New("shared data: creating " + key + ": " + err.Error())
			}
		}
	}
	return nil
}

// Decide implements rules.Store: get the slot → decide → set with the cas read, retried on a
// CAS mismatch up to s.retries times. A dry run only reads.
func (s *slotStore) Decide(_ context.Context, ops []*rules.Op) {
	for _, op := range ops {
		s.decide(op)
	}
}

func (s *slotStore) decide(op *rules.Op) {
	sum := fnv64a(op.Key)
	rule, _, _ := cut(op.Key, '|')
	key := slotKey(rule, op.Alg, s.slots, int(sum%uint64(s.slots)))
	req := op.Req.Bounded()
	for attempt := 0; ; attempt++ {
		val, cas, err := s.data.Get(key)
		if err != nil && !errors.Is(err, types.ErrorStatusNotFound) {
			op.Dec, op.Err = algos.Decision{Allowed: true}, err
			return
		}
		if len(val) == 0 {
			val = []byte{slotVersion}
		}
		now := s.now()
		req.Now = now
		var st algos.State
		i, ok := find(val, sum)
		if ok && entryExpiry(val, i) > now {
			readEntry(val, i, &st)
		}
		before := st
		op.Dec = op.Alg.Decide(&st, req)
		if req.DryRun || st.W == before.W && st.Ban == before.Ban {
			return // nothing to store (a denial, a peek): no write, no contention
		}
		if err := s.write(key, val, cas, i, ok, sum, now, &st, op.Dec.TTL); err == nil {
			return
		} else if !errors.Is(err, types.ErrorStatusCasMismatch) {
			op.Err = err
			return
		}
		if attempt+1 >= s.retries {
			if s.exhausted != nil {
				s.exhausted()
			}
			return
		}
	}
}

// write stores the slot val with the identity's new state (dropping expired entries, evicting
// the one expiring first when full) and sets it with cas.
func (s *slotStore) write(key string, val []byte, cas uint32, idx int, found bool, sum uint64, now int64, st *algos.State, ttl int64) error {
	if val[0] != slotVersion || (len(val)-1)%entrySize != 0 {
		val = []byte{slotVersion} // a layout we do not know: start the slot afresh
		found = false
	}
	b := append(s.buf[:0], slotVersion)
	n := (len(val) - 1) / entrySize
	for i := 0; i < n; i++ {
		if found && i == idx || entryExpiry(val, i) <= now {
			continue
		}
		b = append(b, val[1+i*entrySize:1+(i+1)*entrySize]...)
	}
	if ttl > 0 {
		if (len(b)-1)/entrySize >= s.entries {
			b = evict(b, s.entries-1)
		}
		b = appendEntry(b, sum, now+ttl, st)
	}
	s.buf = b
	return s.data.Set(key, b, cas)
}

// evict drops the entries that expire first until at most keep remain.
func evict(b []byte, keep int) []byte {
	for (len(b)-1)/entrySize > keep {
		n := (len(b) - 1) / entrySize
		first := 0
		for i := 1; i < n; i++ {
			if entryExpiry(b, i) < entryExpiry(b, first) {
				first = i
			}
		}
		off := 1 + first*entrySize
		b = append(b[:off], b[off+entrySize:]...)
	}
	return b
}

// find returns the index of the entry of hash sum in slot val.
func find(val []byte, sum uint64) (int, bool) {
	if len(val) == 0 || val[0] != slotVersion {
		return 0, false
	}
	n := (len(val) - 1) / entrySize
	for i := 0; i < n; i++ {
		if binary.LittleEndian.Uint64(val[1+i*entrySize:]) == sum {
			return i, true
		}
	}
	return 0, false
}

func entryExpiry(val []byte, i int) int64 {
	return int64(binary.LittleEndian.Uint64(val[1+i*entrySize+8:]))
}

func readEntry(val []byte, i int, st *algos.State) {
	e := val[1+i*entrySize+16:]
	for w := range st.W {
		st.W[w] = int64(binary.LittleEndian.Uint64(e[w*8:]))
	}
	st.Ban = int64(binary.LittleEndian.Uint64(e[32:]))
}

func appendEntry(b []byte, sum uint64, expiry int64, st *algos.State) []byte {
	b = binary.LittleEndian.AppendUint64(b, sum)
	b = binary.LittleEndian.AppendUint64(b, uint64(expiry))
	for _, w := range st.W {
		b = binary.LittleEndian.AppendUint64(b, uint64(w))
	}
	return binary.LittleEndian.AppendUint64(b, uint64(st.Ban))
}

// cut is strings.Cut for one byte.
func cut(s string, sep byte) (before, after string, found bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == sep {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

// fnv64a is the 64-bit FNV-1a hash of s (hash/fnv would allocate per call).
func fnv64a(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}
