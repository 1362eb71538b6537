package server

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"reflect"
	"strings"

	"github.com/diana-gw/diana/httplimit"
	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/rules"
)

// maxCheckBody bounds the body of a /v1/check request.
const maxCheckBody = 64 << 10

// CheckRequest is the body of POST /v1/check: the request to decide, as the gateway sees it.
// Every field is optional; an unknown field is refused (400, naming it): a misspelt field would
// otherwise leave a rule without the value it counts by, and the request allowed.
type CheckRequest struct {
	Method   string `json:"method"`
	Host     string `json:"host"`
	Path     string `json:"path"` // the URL path, without the query
	ClientIP string `json:"client_ip"`
	Consumer string `json:"consumer"`
	Route    string `json:"route"`
	// Headers are the request headers that rules may match or count by; names are matched
	// without regard to case.
	Headers map[string]string `json:"headers"`
}

// CheckResponse is the reply of POST /v1/check (status 200).
type CheckResponse struct {
	Allowed bool   `json:"allowed"`
	Rule    string `json:"rule"`   // the rule the numbers are from ("" when no rule applied)
	Status  int    `json:"status"` // the status to answer a denied request with; 200 when allowed
	// Limit, Remaining, Reset (seconds, rounded up) and RetryAfter (seconds, null when the
	// request can never pass) are the rule's numbers.
	Limit      int64  `json:"limit"`
	Remaining  int64  `json:"remaining"`
	Reset      int64  `json:"reset"`
	RetryAfter *int64 `json:"retry_after"`
	DelayMS    int64  `json:"delay_ms"` // hold an allowed request this long before forwarding it
	// Headers are the rate-limit headers the reverse proxy would add to the response (on a
	// denial and on an allowed request alike), already formatted.
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"` // the JSON body of a denial; "" when allowed
	// Unlimited names the unlimited rule that exempted the request from every rule, if one did.
	Unlimited string `json:"unlimited,omitempty"`
}

// headerMap is a request's headers by lower-case name; it implements rules.Headers.
type headerMap map[string]string

func (h headerMap) Get(name string) string { return h[strings.ToLower(name)] }

// adminHandler serves the decision API (/v1/check, and /v1/auth for forward auth: auth.go), the admin operations (admin.go), the metrics and the
// health check.
func (s *Server) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/check", s.serveCheck)
	mux.HandleFunc("/v1/auth", s.serveAuth)
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
// Statuses: 200 with a CheckResponse; 400 {"error"} for a body that is not a JSON object of
// CheckRequest's fields (an unknown field or null included), is over 64 KiB, or holds a
// client_ip that is not an IP address; 401
// {"error"} when admin.token is set and the request lacks "Authorization: Bearer TOKEN";
// 405 {"error"} for any method but POST.
//
// Concurrency rules release their lease as soon as the check is decided: the API cannot tell
// when the gateway's request ends, so they limit only concurrent checks. Use them in the proxy.
func (s *Server) serveCheck(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeJSON(w, http.StatusMethodNotAllowed, errorBody{"method " + r.Method + " not allowed: use POST"})
		return
	}
	l, in, ok := s.checkInput(w, r, false)
	if !ok {
		return
	}
	res := l.engine.Check(r.Context(), &in)
	l.engine.Release(context.WithoutCancel(r.Context()), &res)
	if !res.Allowed {
		s.logDenial(&in, &res)
	}
	writeJSON(w, http.StatusOK, checkResponse(&res))
}

// checkInput reads the CheckRequest of a /v1/check or /v1/admin/peek call (admin: an admin
// operation) into the engine's input, answering the call itself when it cannot (401, 403, 400).
func (s *Server) checkInput(w http.ResponseWriter, r *http.Request, admin bool) (*live, rules.Input, bool) {
	if !s.authorized(w, r, admin) {
		return nil, rules.Input{}, false
	}
	body, ok := readBody(w, r)
	if !ok {
		return nil, rules.Input{}, false
	}
	req, err := decodeStrict[CheckRequest](body)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, errorBody{err.Error()})
		return nil, rules.Input{}, false
	}
	l := s.live.Load()
	in, ok := l.input(w, &req)
	return l, in, ok
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

// input turns a CheckRequest into the engine's input, answering 400 itself for a client_ip
// that is not an IP address.
func (l *live) input(w http.ResponseWriter, req *CheckRequest) (rules.Input, bool) {
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
	for k, v := range req.Headers {
		h[strings.ToLower(k)] = v
	}
	in.Headers = h
	return in, true
}

// decodeStrict reads a T from one JSON object of its fields, nothing else: an unknown field,
// null, an empty body or a second object is an error that says so.
func decodeStrict[T any](body []byte) (T, error) {
	var v T
	fields := jsonFields[T]()
	if t := bytes.TrimSpace(body); len(t) == 0 || t[0] != '{' {
		what := "nothing"
		if len(t) > 0 {
			what = string(t[:min(len(t), 20)])
		}
		return v, fmt.Errorf("the body must be a JSON object of the fields %s, got %s", fields, what)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return v, fmt.Errorf("%s: unknown field; the fields are %s", strings.Trim(name, `"`), fields)
		}
		return v, errors.New(checkJSONError(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return v, errors.New("the body holds more than one JSON object")
	}
	return v, nil
}

// jsonFields lists a struct's fields by their JSON names, for errors.
func jsonFields[T any]() string {
	t := reflect.TypeFor[T]()
	names := make([]string, t.NumField())
	for i := range names {
		names[i], _, _ = strings.Cut(t.Field(i).Tag.Get("json"), ",")
	}
	return strings.Join(names, ", ")
}

// checkJSONError words a JSON decoding error for the caller, naming the field when it can.
func checkJSONError(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		switch {
		case te.Field == "headers" || strings.HasPrefix(te.Field, "headers."):
			return "headers: must be an object whose values are strings, got " + te.Value
		case te.Field != "":
			return te.Field + ": must be a string, got " + te.Value
		}
		return "the body must be a JSON object, got " + te.Value
	}
	return "the body is not valid JSON: " + err.Error()
}

// checkResponse builds the reply to a decided check.
func checkResponse(res *rules.Result) *CheckResponse {
	d := &res.Decision
	out := &CheckResponse{
		Allowed:   res.Allowed,
		Status:    http.StatusOK,
		Limit:     d.Limit,
		Remaining: d.Remaining,
		Reset:     rules.Seconds(d.ResetAfter),
		DelayMS:   (res.Delay + algos.Millisecond - 1) / algos.Millisecond,
		Headers:   map[string]string{},
	}
	if d.RetryAfter != algos.Never {
		ra := rules.Seconds(d.RetryAfter)
		out.RetryAfter = &ra
	}
	if res.Rule != nil {
		out.Rule = res.Rule.Name
	}
	if res.Unlimited != nil {
		out.Unlimited = res.Unlimited.Name
	}
	h := http.Header{}
	httplimit.SetHeaders(h, res)
	for k, v := range h {
		out.Headers[k] = strings.Join(v, ", ")
	}
	if !res.Allowed {
		status, body := res.Denial()
		out.Status, out.Body = status, string(body)
	}
	return out
}
