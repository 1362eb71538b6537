package server

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/diana-gw/diana/shared/check"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/shared/usage"
	"github.com/diana-gw/diana/store/stack"
)

// Settling a usage rule through the decision API (the Envoy filter in cluster mode): a
// /v1/check request with "settle": true reserves each usage rule's estimate, as the proxy does,
// and answers with one ticket per reservation (check.Response.Usage: the rule, where its cost
// is read from the response, the ticket). When the response has ended, the caller sends each
// ticket back to POST /v1/settle with the cost it read, or the reason it read none, and dianad
// settles it (rules.Engine.Settle), counted in diana_usage_tokens_total and
// diana_usage_unread_total as the proxy's settlements are.
//
// A ticket is the reservation itself (rule, key, estimate, time of admission), signed with
// HMAC-SHA256, so that dianad keeps nothing per request and any node that shares the key can
// settle it: the key is derived from admin.token, or, without a token, drawn at start (a
// ticket then settles only on the node that issued it). The signature keeps a caller from
// crediting a key or an estimate it was not given; a ticket older than maxTicketAge is refused.
//
// Each ticket settles at most once. Its id (the first 16 bytes of its signature; the ticket
// carries a nonce, so that two reservations alike still differ) is recorded before it is
// settled: with a redis section, by SET NX with a PX of the ticket's remaining life, one record
// for every node; without one, or while Redis cannot be reached (breaker open, an error), in this
// node's memory (ticketRecord), bounded by maxRecorded tickets and by their life. A ticket
// recorded before is a replay: it is not settled, and the answer is 409. A ticket the full local
// record cannot take is not settled either (503: nothing is forgotten to make room). Both are
// counted in diana_settle_refused_total and logged, rate-limited.
//
// The record is a separate call before the settlement, not a part of the settle scripts: the
// settlement keeps its path through the cluster stack (breaker, on_error, batching) unchanged, and
// the scripts and their Go twins stay as they are. The order makes the two part in one direction
// only: a ticket recorded and then not settled (the node dies between, or the store fails it)
// is a lost settlement, its estimate left charged, as when a node dies between admission and
// settlement; never a ticket settled twice.

// maxTicketAge bounds the time between a check and its settlement.
const maxTicketAge = time.Hour

// maxRecorded bounds the local record of settled tickets.
const maxRecorded = 1 << 20

// processKey signs the tickets of a dianad without admin.token.
var processKey = sync.OnceValue(func() []byte {
	k := make([]byte, 32)
	rand.Read(k)
	return k
})

// ticketKey is the key tickets are signed with.
func (s *Server) ticketKey() []byte {
	if tok := s.cfg.Admin.Token; tok != "" {
		k := sha256.Sum256([]byte("diana settle ticket\x00" + tok))
		return k[:]
	}
	return processKey()
}

// ticket is a reservation on the wire.
type ticket struct {
	Rule     string `json:"r"`
	Key      string `json:"k"`
	Estimate int64  `json:"e"`
	Fallback *int64 `json:"f,omitempty"` // absent in the tickets of an older dianad
	At       int64  `json:"t"`           // Unix µs of the admission
	Nonce    string `json:"n"`           // tells apart tickets otherwise alike (nonce)
}

// nonces makes each ticket's nonce: a prefix drawn at start (the nodes' differ) and a count.
var nonces = struct {
	prefix func() string
	n      atomic.Uint64
}{prefix: sync.OnceValue(func() string {
	b := make([]byte, 9)
	rand.Read(b)
	return b64.EncodeToString(b)
})}

func nonce() string {
	return nonces.prefix() + strconv.FormatUint(nonces.n.Add(1), 36)
}

var b64 = base64.RawURLEncoding

// tickets returns the usage entries of a check that settles later.
func (s *Server) tickets(l *live, res *rules.Result) []check.Usage {
	now := time.Now().UnixMicro()
	key := s.ticketKey()
	var out []check.Usage
	for _, rv := range l.engine.Reserved(res) {
		p, _ := json.Marshal(ticket{Rule: rv.Rule.Name, Key: rv.Key, Estimate: rv.Estimate, Fallback: &rv.Fallback, At: now - rv.Age, Nonce: nonce()})
		m := hmac.New(sha256.New, key)
		m.Write(p)
		u := check.Usage{Rule: rv.Rule.Name, Ticket: b64.EncodeToString(p) + "." + b64.EncodeToString(m.Sum(nil))}
		if f := rv.Rule.Usage.Header; f != nil {
			u.Header = f.String()
		}
		if f := rv.Rule.Usage.Body; f != nil {
			u.Body = f.String()
		}
		if e := rv.Rule.Usage.StreamUsage; e != usage.OneEvent {
			u.StreamUsage = e.String()
		}
		u.Format = rv.Format
		out = append(out, u)
	}
	return out
}

// opened is a ticket checked: its reservation, its id (for the record) and when it expires (Unix µs).
type opened struct {
	rules.Reservation
	id      [16]byte
	expires int64
}

// openTicket checks a ticket's signature and age and finds its rule among the running ones.
func (s *Server) openTicket(l *live, t string, now int64) (opened, error) {
	p64, mac64, ok := strings.Cut(t, ".")
	p, err1 := b64.DecodeString(p64)
	mac, err2 := b64.DecodeString(mac64)
	if !ok || err1 != nil || err2 != nil {
		return opened{}, errors.New("not a ticket of /v1/check")
	}
	m := hmac.New(sha256.New, s.ticketKey())
	m.Write(p)
	if !hmac.Equal(mac, m.Sum(nil)) {
		return opened{}, errors.New("signature does not match (issued by a dianad with another admin.token, or altered)")
	}
	var tk ticket
	if err := json.Unmarshal(p, &tk); err != nil {
		return opened{}, fmt.Errorf("reading it: %w", err)
	}
	age := now - tk.At
	if age > maxTicketAge.Microseconds() {
		return opened{}, errors.New("expired: issued more than an hour ago")
	}
	r := l.engine.Rule(tk.Rule)
	if r == nil || r.Usage == nil {
		return opened{}, errors.New("its rule " + tk.Rule + " is no longer a running usage rule")
	}
	fallback := tk.Estimate // an older dianad's ticket: its default fallback, the estimate
	switch {
	case tk.Fallback != nil:
		fallback = *tk.Fallback
	case r.Usage.Fallback >= 0:
		fallback = r.Usage.Fallback
	}
	return opened{Reservation: rules.Reservation{Rule: r, Key: tk.Key, Estimate: tk.Estimate, Fallback: fallback, Age: max(age, 0)},
		id: [16]byte(mac[:16]), expires: tk.At + maxTicketAge.Microseconds()}, nil
}

// serveSettle is POST /v1/settle {"settle": [{"ticket", "cost"} or {"ticket", "unread"}]}: it
// settles each ticket a /v1/check with "settle": true gave, charging the cost, or for an unread
// reason the rule's fallback. Statuses: 204 when settled; 400 {"error"} naming the field (a
// malformed body, over 64 KiB, a cost out of 0..10^15, a ticket that is not valid; nothing is
// settled then); 409 {"error", "refused"} when a ticket was settled before, and 503 likewise when
// the local record is full (the entries refused are not settled, the others are); 401 as
// /v1/check.
func (s *Server) serveSettle(w http.ResponseWriter, r *http.Request) {
	if !s.authorized(w, r, false) {
		return
	}
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	list, err := check.ParseSettle(body)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, errorBody{err.Error()})
		return
	}
	l := s.live.Load()
	now := time.Now().UnixMicro()
	tk := make([]opened, len(list))
	for i, x := range list {
		if tk[i], err = s.openTicket(l, x.Ticket, now); err != nil {
			writeJSON(w, http.StatusBadRequest, errorBody{fmt.Sprintf("settle[%d].ticket: %v", i, err)})
			return
		}
	}
	fresh := s.record(r.Context(), tk, now)
	var out refusal
	for i, x := range list {
		if fresh[i] != nil {
			out.refuse(i, fresh[i])
			s.met.settleRefused.WithLabelValues(refusalReason(fresh[i])).Inc()
			s.limited.Warn("settle ticket refused: not settled", "rule", tk[i].Rule.Name, "err", fresh[i])
			continue
		}
		res := l.engine.Resume([]rules.Reservation{tk[i].Reservation})
		l.engine.Settle(context.WithoutCancel(r.Context()), &res, func(rule *rules.Rule) (int64, error) {
			n := x.Cost
			if x.HasTokens {
				n = rule.Usage.Price("", usage.Usage{Tokens: x.Tokens, Model: x.Model})
			}
			if x.Unread != "" {
				return n, unread(x.Unread)
			}
			return n, nil
		})
	}
	if out.Refused == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	writeJSON(w, out.status, out)
}

var (
	// errReplay refuses a ticket settled before.
	errReplay = errors.New("settled before (a ticket settles once)")
	// errRecordFull refuses a ticket the local record cannot take.
	errRecordFull = fmt.Errorf("this node's record of settled tickets is full (%d tickets of the last hour): not settled, retry later", maxRecorded)
)

func refusalReason(err error) string {
	if errors.Is(err, errReplay) {
		return "replay"
	}
	return "record_full"
}

// refusal is the answer to a settlement some of whose tickets were refused.
type refusal struct {
	status  int
	Error   string `json:"error"`   // the first refused entry, named as settle[i].ticket
	Refused []int  `json:"refused"` // the indexes of the entries not settled
}

func (o *refusal) refuse(i int, err error) {
	st := http.StatusConflict
	if errors.Is(err, errRecordFull) {
		st = http.StatusServiceUnavailable
	}
	if o.Refused == nil {
		o.Error = fmt.Sprintf("settle[%d].ticket: %v", i, err)
	}
	o.status = max(o.status, st)
	o.Refused = append(o.Refused, i)
}

// record records each ticket of tk as settled, and returns for each nil (recorded now: settle
// it), errReplay or errRecordFull. The record is Redis's when there is one and it answers, else
// this node's.
func (s *Server) record(ctx context.Context, tk []opened, now int64) []error {
	out := make([]error, len(tk))
	if s.rdb != nil {
		err := s.cluster.Call(ctx, func(ctx context.Context) error { return s.recordRedis(ctx, tk, now, out) })
		if err == nil {
			return out
		}
		s.limited.Warn("settle: Redis did not record the tickets: recorded in this node's memory (a replay on another node is not seen)", "err", err)
	}
	for i, t := range tk {
		out[i] = s.settledLocal.add(t.id, t.expires, now)
	}
	return out
}

// recordRedis records the tickets in Redis, one SET NX each with a PX of the ticket's remaining
// life, in one round trip (behind the decisions' timeout and circuit breaker: failover.Store.Call).
func (s *Server) recordRedis(ctx context.Context, tk []opened, now int64, out []error) error {
	prefix := cmp.Or(s.cfg.Redis.Prefix, stack.DefaultPrefix)
	p := s.rdb.Pipeline()
	cmds := make([]*redis.BoolCmd, len(tk))
	for i, t := range tk {
		life := max(time.Duration(t.expires-now)*time.Microsecond, time.Millisecond)
		cmds[i] = p.SetNX(ctx, prefix+"settled:"+b64.EncodeToString(t.id[:]), 1, life)
	}
	if _, err := p.Exec(ctx); err != nil {
		return fmt.Errorf("recording settled tickets: %w", err)
	}
	for i, c := range cmds {
		if !c.Val() {
			out[i] = errReplay
		}
	}
	return nil
}

// ticketRecord is a node's own record of the tickets settled: each id until its ticket expires,
// at most max of them. When full, ids whose tickets expired are dropped (a sweep at most once per
// first expiry); if none has, a new ticket is refused (errRecordFull) rather than one forgotten.
type ticketRecord struct {
	mu        sync.Mutex
	max       int
	until     map[[16]byte]int64 // id: when its ticket expires (Unix µs)
	nextSweep int64              // the earliest expiry in until as of the last sweep
}

// add records id until exp, unless it is recorded already (errReplay) or the record is full.
func (r *ticketRecord) add(id [16]byte, exp, now int64) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.until[id]; ok && e > now {
		return errReplay
	}
	if r.until == nil {
		r.until = map[[16]byte]int64{}
	}
	if len(r.until) >= r.max && now >= r.nextSweep {
		r.nextSweep = math.MaxInt64
		for k, e := range r.until {
			if e <= now {
				delete(r.until, k)
			} else {
				r.nextSweep = min(r.nextSweep, e)
			}
		}
	}
	if len(r.until) >= r.max {
		return errRecordFull
	}
	r.until[id] = exp
	r.nextSweep = min(r.nextSweep, exp)
	return nil
}

// unread is the error of a usage the caller could not read, of the class its reason names.
func unread(reason string) error {
	if c := usage.ClassOf(reason); c != nil {
		return fmt.Errorf("%w (the caller's reason: %s)", c, clipReason(reason))
	}
	return fmt.Errorf("%w: the caller's reason: %s", usage.ErrMissing, clipReason(reason))
}

// clipReason keeps a caller's reason short in the log.
func clipReason(s string) string {
	if len(s) > 200 {
		return s[:200] + "…"
	}
	return s
}
