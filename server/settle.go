package server

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/diana-gw/diana/shared/check"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/shared/usage"
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

// maxTicketAge bounds the time between a check and its settlement.
const maxTicketAge = time.Hour

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
	At       int64  `json:"t"` // Unix µs of the admission
}

var b64 = base64.RawURLEncoding

// tickets returns the usage entries of a check that settles later.
func (s *Server) tickets(l *live, res *rules.Result) []check.Usage {
	now := time.Now().UnixMicro()
	key := s.ticketKey()
	var out []check.Usage
	for _, rv := range l.engine.Reserved(res) {
		p, _ := json.Marshal(ticket{Rule: rv.Rule.Name, Key: rv.Key, Estimate: rv.Estimate, At: now - rv.Age})
		m := hmac.New(sha256.New, key)
		m.Write(p)
		u := check.Usage{Rule: rv.Rule.Name, Ticket: b64.EncodeToString(p) + "." + b64.EncodeToString(m.Sum(nil))}
		if f := rv.Rule.Usage.Header; f != nil {
			u.Header = f.String()
		}
		if f := rv.Rule.Usage.Body; f != nil {
			u.Body = f.String()
		}
		out = append(out, u)
	}
	return out
}

// openTicket checks a ticket's signature and age and finds its rule among the running ones.
func (s *Server) openTicket(l *live, t string, now int64) (rules.Reservation, error) {
	p64, mac64, ok := strings.Cut(t, ".")
	p, err1 := b64.DecodeString(p64)
	mac, err2 := b64.DecodeString(mac64)
	if !ok || err1 != nil || err2 != nil {
		return rules.Reservation{}, errors.New("not a ticket of /v1/check")
	}
	m := hmac.New(sha256.New, s.ticketKey())
	m.Write(p)
	if !hmac.Equal(mac, m.Sum(nil)) {
		return rules.Reservation{}, errors.New("signature does not match (issued by a dianad with another admin.token, or altered)")
	}
	var tk ticket
	if err := json.Unmarshal(p, &tk); err != nil {
		return rules.Reservation{}, fmt.Errorf("reading it: %w", err)
	}
	age := now - tk.At
	if age > maxTicketAge.Microseconds() {
		return rules.Reservation{}, errors.New("expired: issued more than an hour ago")
	}
	r := l.engine.Rule(tk.Rule)
	if r == nil || r.Usage == nil {
		return rules.Reservation{}, errors.New("its rule " + tk.Rule + " is no longer a running usage rule")
	}
	return rules.Reservation{Rule: r, Key: tk.Key, Estimate: tk.Estimate, Age: max(age, 0)}, nil
}

// serveSettle is POST /v1/settle {"settle": [{"ticket", "cost"} or {"ticket", "unread"}]}: it
// settles each ticket a /v1/check with "settle": true gave, charging the cost, or for an unread
// reason the rule's fallback. Statuses: 204 when settled; 400 {"error"} naming the field (a
// malformed body, over 64 KiB, a cost out of 0..10^15, a ticket that is not valid; nothing is
// settled then); 401 as /v1/check.
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
	rv := make([]rules.Reservation, len(list))
	for i, x := range list {
		if rv[i], err = s.openTicket(l, x.Ticket, now); err != nil {
			writeJSON(w, http.StatusBadRequest, errorBody{fmt.Sprintf("settle[%d].ticket: %v", i, err)})
			return
		}
	}
	for i, x := range list {
		res := l.engine.Resume(rv[i : i+1])
		l.engine.Settle(context.WithoutCancel(r.Context()), &res, func(*rules.Rule) (int64, error) {
			if x.Unread != "" {
				return 0, unread(x.Unread)
			}
			return x.Cost, nil
		})
	}
	w.WriteHeader(http.StatusNoContent)
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
