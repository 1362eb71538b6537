package server

import (
	"net/http"
	"strconv"

	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/conf"
	"github.com/diana-gw/diana/shared/rules"
)

// The admin operations, for operators: look at an identity's state without spending, reset it,
// lift its ban, list the bans of a rule. They need admin.token (403 without one, 401 without
// the right bearer token), and work on the running rules: a cluster rule's state is Redis's,
// shared by every node (a reset also clears this node's fallback state for on_error: local);
// a local rule's is this node's alone. Requests in flight are not disturbed.

// PeekResponse is the reply of POST /v1/admin/peek: what every rule that applies to the request
// would answer now, with nothing taken.
type PeekResponse struct {
	Rules []PeekRule `json:"rules"`
}

// PeekRule is one rule's answer in a PeekResponse, as /v1/check would report it: Remaining is
// what would remain after this request. Reset and RetryAfter are seconds, rounded up;
// RetryAfter is null when the request can never pass. Error is set when the rule's store could
// not decide, and the numbers are then its on_error policy's.
type PeekRule struct {
	Rule       string `json:"rule"`
	Key        string `json:"key"` // the identity, as /v1/admin/reset, unban and bans name it
	Mode       string `json:"mode"`
	Action     string `json:"action"` // a shadow rule's denial lets the request through
	Allowed    bool   `json:"allowed"`
	Limit      int64  `json:"limit"`
	Remaining  int64  `json:"remaining"`
	Reset      int64  `json:"reset"`
	RetryAfter *int64 `json:"retry_after"`
	Error      string `json:"error,omitempty"`
}

// KeyRequest is the body of POST /v1/admin/reset and /v1/admin/unban: a rule and one of its
// identities.
type KeyRequest struct {
	Rule string `json:"rule"`
	Key  string `json:"key"`
}

// KeyResponse is their reply: Found says whether there was a state to reset or a ban to lift.
type KeyResponse struct {
	Rule  string `json:"rule"`
	Key   string `json:"key"`
	Found bool   `json:"found"`
}

// BansResponse is the reply of GET /v1/admin/bans?rule=NAME: the identities a ban holds now,
// each with the seconds it still holds (rounded up), at most max of them (default 1,000);
// More says that there may be more.
type BansResponse struct {
	Rule string   `json:"rule"`
	Mode string   `json:"mode"`
	Bans []BanRow `json:"bans"`
	More bool     `json:"more"`
}

// BanRow is one identity under a ban.
type BanRow struct {
	Key  string `json:"key"`
	Left int64  `json:"left"`
}

// maxBans bounds what one GET /v1/admin/bans lists.
const (
	defaultBans = 1000
	maxBans     = 100_000
)

// servePeek is POST /v1/admin/peek with a /v1/check body: each applying rule's answer as a dry
// run. Nothing is taken, no ban starts, no metric counts it.
func (s *Server) servePeek(w http.ResponseWriter, r *http.Request) {
	l, _, in, ok := s.checkInput(w, r, true)
	if !ok {
		return
	}
	peeked, ok := l.engine.Peek(r.Context(), &in)
	if !ok {
		writeJSON(w, http.StatusBadRequest, errorBody{"path: holds a control character, or an escaped slash which escaped_slashes: reject refuses"})
		return
	}
	out := PeekResponse{Rules: make([]PeekRule, len(peeked))}
	for i, p := range peeked {
		d := &p.Decision
		row := PeekRule{Rule: p.Rule.Name, Key: p.Key, Mode: p.Rule.Mode.String(), Action: p.Rule.Action.String(), Allowed: d.Allowed,
			Limit: d.Limit, Remaining: d.Remaining, Reset: rules.Seconds(d.ResetAfter)}
		if d.RetryAfter != algos.Never {
			ra := rules.Seconds(d.RetryAfter)
			row.RetryAfter = &ra
		}
		if p.Err != nil {
			row.Error = p.Err.Error()
		}
		out.Rules[i] = row
	}
	writeJSON(w, http.StatusOK, out)
}

// serveReset is POST /v1/admin/reset {"rule", "key"}: the identity starts afresh, ban included.
func (s *Server) serveReset(w http.ResponseWriter, r *http.Request) {
	s.serveKey(w, r, "reset", func(rule *rules.Rule, key string) (bool, error) {
		found := s.mem.Reset(key) // a local rule's state, or a cluster rule's fallback state
		if rule.Mode == rules.Cluster {
			inRedis, err := s.rstore.Reset(r.Context(), key)
			return found || inRedis, err
		}
		return found, nil
	})
}

// serveUnban is POST /v1/admin/unban {"rule", "key"}: the ban ends, the count stays.
func (s *Server) serveUnban(w http.ResponseWriter, r *http.Request) {
	s.serveKey(w, r, "unban", func(rule *rules.Rule, key string) (bool, error) {
		found := s.mem.Unban(key)
		if rule.Mode == rules.Cluster {
			inRedis, err := s.rstore.Unban(r.Context(), key)
			return found || inRedis, err
		}
		return found, nil
	})
}

// serveKey reads a KeyRequest, checks that the key is one of the rule's, applies op and logs it.
func (s *Server) serveKey(w http.ResponseWriter, r *http.Request, name string, op func(*rules.Rule, string) (bool, error)) {
	if !s.authorized(w, r, true) {
		return
	}
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	var req KeyRequest
	err := conf.DecodeObject(body, "rule, key", func(o *conf.Obj) {
		req.Rule, req.Key = o.String("rule", ""), o.String("key", "")
	})
	if err != nil {
		writeJSON(w, http.StatusBadRequest, errorBody{err.Error()})
		return
	}
	rule, ok := s.rule(w, req.Rule)
	if !ok {
		return
	}
	if !rule.OwnsKey(req.Key) {
		writeJSON(w, http.StatusBadRequest, errorBody{"key: " + strconv.Quote(req.Key) + " is not an identity of rule " +
			strconv.Quote(rule.Name) + " (its keys are the rule's name, then | and the values it counts by, as /v1/admin/peek and /v1/admin/bans show them)"})
		return
	}
	found, err := op(rule, req.Key)
	if err != nil {
		s.log.Warn("admin: "+name+" failed", "rule", rule.Name, "key", req.Key, "err", err)
		writeJSON(w, http.StatusBadGateway, errorBody{err.Error()})
		return
	}
	s.log.Info("admin: "+name, "rule", rule.Name, "key", req.Key, "found", found, "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, KeyResponse{Rule: rule.Name, Key: req.Key, Found: found})
}

// serveBans is GET /v1/admin/bans?rule=NAME[&max=N].
func (s *Server) serveBans(w http.ResponseWriter, r *http.Request) {
	if !s.authorized(w, r, true) {
		return
	}
	q := r.URL.Query()
	for k := range q {
		if k != "rule" && k != "max" {
			writeJSON(w, http.StatusBadRequest, errorBody{k + ": unknown parameter; the parameters are rule, max"})
			return
		}
	}
	rule, ok := s.rule(w, q.Get("rule"))
	if !ok {
		return
	}
	n := defaultBans
	if m := q.Get("max"); m != "" {
		v, err := strconv.Atoi(m)
		if err != nil || v < 1 || v > maxBans {
			writeJSON(w, http.StatusBadRequest, errorBody{"max: must be an integer from 1 to " + strconv.Itoa(maxBans) + ", got " + strconv.Quote(m)})
			return
		}
		n = v
	}
	out := BansResponse{Rule: rule.Name, Mode: rule.Mode.String(), Bans: []BanRow{}}
	if rule.Mode == rules.Cluster {
		bans, more, err := s.rstore.Bans(r.Context(), rule.Name, rule.OwnsKey, n)
		if err != nil {
			writeJSON(w, http.StatusBadGateway, errorBody{err.Error()})
			return
		}
		for _, b := range bans {
			out.Bans = append(out.Bans, BanRow{Key: b.Key, Left: rules.Seconds(b.Left)})
		}
		out.More = more
	} else {
		bans, more := s.mem.Bans(rule.OwnsKey, n)
		for _, b := range bans {
			out.Bans = append(out.Bans, BanRow{Key: b.Key, Left: rules.Seconds(b.Left)})
		}
		out.More = more
	}
	writeJSON(w, http.StatusOK, out)
}

// rule finds a running rule by name, answering 400 or 404 itself if it cannot.
func (s *Server) rule(w http.ResponseWriter, name string) (*rules.Rule, bool) {
	if name == "" {
		writeJSON(w, http.StatusBadRequest, errorBody{"rule: is required"})
		return nil, false
	}
	rule := s.live.Load().engine.Rule(name)
	if rule == nil {
		writeJSON(w, http.StatusNotFound, errorBody{"rule: no running rule is named " + strconv.Quote(name)})
		return nil, false
	}
	return rule, true
}
