package server

import (
	"context"
	"crypto/subtle"
	"errors"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/check"
	"github.com/diana-gw/diana/shared/rules"
)

// maxCheckBody bounds the body of a /v1/check request.
const maxCheckBody = 64 << 10

// headerMap is a request's headers by lower-case name; it implements rules.Headers.
type headerMap map[string]string

func (h headerMap) Get(name string) string { return h[strings.ToLower(name)] }

// adminHandler serves the decision API (/v1/check, and /v1/auth for forward auth: auth.go), the admin operations (admin.go), the metrics and the
// health check.
func (s *Server) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/check", s.serveCheck)
	mux.HandleFunc("/v1/auth", s.serveAuth)
	mux.HandleFunc("POST /v1/settle", s.serveSettle)
	mux.HandleFunc("POST /v1/admin/peek", s.servePeek)
	mux.HandleFunc("POST /v1/admin/reset", s.serveReset)
	mux.HandleFunc("POST /v1/admin/unban", s.serveUnban)
	mux.HandleFunc("GET /v1/admin/bans", s.serveBans)
	mux.Handle("/metrics", s.met.handler())
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if s.stopping.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, "shutting down\n")
			return
		}
		io.WriteString(w, "ok\n")
	})
	return mux
}

// serveCheck is POST /v1/check, the decision API that gateways (the Envoy filter in cluster
// mode) call once per request: it decides the request against the running rules, exactly as
// the reverse proxy would, and returns the verdict, the headers and the denial body. The
// request counts: an allowed check takes its units.
//
// Statuses: 200 with a check.Response; 400 {"error"} for a body that is not a JSON object of
// check.Request's fields (an unknown field or null included), is over 64 KiB, or holds a
// client_ip that is not an IP address; 401
// {"error"} when admin.token is set and the request lacks "Authorization: Bearer TOKEN";
// 405 {"error"} for any method but POST.
//
// Concurrency rules release their lease as soon as the check is decided: the API cannot tell
// when the gateway's request ends, so they limit only concurrent checks. Use them in the proxy.
// Likewise a rule whose cost comes from the response (usage) never sees it here: each request
// is charged the rule's fallback at once, counted and logged as unread, unless the request says
// "settle": true: then the answer's "usage" gives a ticket per reservation, which the caller
// settles with POST /v1/settle once the response has ended (settle.go).
func (s *Server) serveCheck(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeJSON(w, http.StatusMethodNotAllowed, errorBody{"method " + r.Method + " not allowed: use POST"})
		return
	}
	l, req, in, ok := s.checkInput(w, r, false)
	if !ok {
		return
	}
	res := l.engine.Check(r.Context(), &in)
	l.engine.Release(context.WithoutCancel(r.Context()), &res)
	var settle []check.Usage
	if req.Settle {
		settle = s.tickets(l, &res) // settled by POST /v1/settle (settle.go)
	} else {
		l.engine.Settle(context.WithoutCancel(r.Context()), &res, unseen)
	}
	if !res.Allowed {
		s.logDenial(&in, &res)
	}
	out := checkResponse(&res)
	out.Usage = settle
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Write(append(out.AppendJSON(make([]byte, 0, 512)), '\n'))
}

// checkInput reads the check.Request of a /v1/check or /v1/admin/peek call (admin: an admin
// operation) into the engine's input, answering the call itself when it cannot (401, 403, 400).
func (s *Server) checkInput(w http.ResponseWriter, r *http.Request, admin bool) (*live, check.Request, rules.Input, bool) {
	if !s.authorized(w, r, admin) {
		return nil, check.Request{}, rules.Input{}, false
	}
	body, ok := readBody(w, r)
	if !ok {
		return nil, check.Request{}, rules.Input{}, false
	}
	req, err := check.ParseRequest(body)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, errorBody{err.Error()})
		return nil, req, rules.Input{}, false
	}
	l := s.live.Load()
	in, ok := l.input(w, &req)
	return l, req, in, ok
}

// authorized checks the bearer token of an admin request, answering 401 itself when it is
// missing or wrong. Without admin.token, a request passes unless admin says that it changes or
// reveals state (the admin operations): then it is refused with 403.
func (s *Server) authorized(w http.ResponseWriter, r *http.Request, admin bool) bool {
	tok := s.cfg.Admin.Token
	if tok == "" {
		if admin {
			writeJSON(w, http.StatusForbidden, errorBody{"admin operations need admin.token (or token_file, or DIANA_ADMIN_TOKEN) to be set"})
		}
		return !admin
	}
	auth := r.Header.Get("Authorization")
	// The scheme's name is case-insensitive (RFC 9110), the token is not.
	ok := len(auth) > 7 && strings.EqualFold(auth[:7], "Bearer ")
	if !ok || subtle.ConstantTimeCompare([]byte(auth[7:]), []byte(tok)) != 1 {
		w.Header().Set("WWW-Authenticate", `Bearer realm="diana"`)
		writeJSON(w, http.StatusUnauthorized, errorBody{"missing or wrong bearer token (Authorization: Bearer TOKEN)"})
		return false
	}
	return true
}

// readBody reads a request body of at most maxCheckBody bytes, answering 400 itself if it cannot.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxCheckBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeJSON(w, http.StatusBadRequest, errorBody{"request body larger than 64 KiB"})
		} else {
			writeJSON(w, http.StatusBadRequest, errorBody{"reading the request body: " + err.Error()})
		}
		return nil, false
	}
	return body, true
}

// input turns a check.Request into the engine's input, answering 400 itself for a client_ip
// that is not an IP address.
func (l *live) input(w http.ResponseWriter, req *check.Request) (rules.Input, bool) {
	in := rules.Input{Method: req.Method, Host: req.Host, Path: req.Path, Consumer: req.Consumer, Route: req.Route}
	if req.ClientIP != "" {
		ip, err := netip.ParseAddr(req.ClientIP)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, errorBody{"client_ip: not an IP address: " + req.ClientIP})
			return in, false
		}
		in.SetClient(ip, l.opts.IPv6Prefix)
	}
	h := make(headerMap, len(req.Headers))
	for _, kv := range req.Headers {
		h[strings.ToLower(kv[0])] = kv[1]
	}
	in.Headers = h
	// The body is the gateway's: a usage rule reserves the input its length stands for.
	in.BodyLength, _ = strconv.ParseInt(h["content-length"], 10, 64)
	return in, true
}

// checkResponse builds the reply to a decided check.
func checkResponse(res *rules.Result) *check.Response {
	d := &res.Decision
	out := &check.Response{
		Allowed:    res.Allowed,
		Status:     http.StatusOK,
		Limit:      d.Limit,
		Remaining:  d.Remaining,
		Reset:      rules.Seconds(d.ResetAfter),
		RetryAfter: -1,
		DelayMS:    (res.Delay + algos.Millisecond - 1) / algos.Millisecond,
	}
	if d.RetryAfter != algos.Never {
		out.RetryAfter = rules.Seconds(d.RetryAfter)
	}
	if res.Rule != nil {
		out.Rule = res.Rule.Name
	}
	if res.Unlimited != nil {
		out.Unlimited = res.Unlimited.Name
	}
	var buf [6]rules.Header
	for _, x := range res.AppendHeaders(buf[:0]) {
		out.Headers = append(out.Headers, [2]string{x.Name, x.Value})
	}
	if !res.Allowed {
		status, body := res.Denial()
		out.Status, out.Body = status, string(body)
	}
	return out
}
