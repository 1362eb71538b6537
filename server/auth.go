package server

import (
	"context"
	"crypto/subtle"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/diana-gw/diana/httplimit"
)

// authQuery is what the query string of /v1/auth may say. The gateway's config writes it in
// the auth address, the one place Traefik lets it say anything; the original request's own
// query is in X-Original-URI or X-Forwarded-Uri.
type authQuery struct {
	token      string // admin.token, when it is set: the client's Authorization header is forwarded as its own
	denyStatus int    // 0, or the status to deny with instead of the rule's (nginx: 401 or 403)
	route      string // the route dimension, as the gateway's config names the route; "" for none
}

// parseAuthQuery reads the query of a /v1/auth request; an unknown or repeated parameter, or a
// deny_status other than 401 and 403, is an error naming it.
func parseAuthQuery(raw string) (authQuery, string) {
	var q authQuery
	vals, err := url.ParseQuery(raw)
	if err != nil {
		return q, "the query string cannot be read: " + err.Error()
	}
	for k, v := range vals {
		if len(v) > 1 {
			return q, k + ": given " + strconv.Itoa(len(v)) + " times"
		}
		switch k {
		case "token":
			q.token = v[0]
		case "route":
			q.route = v[0]
		case "deny_status":
			if v[0] != "401" && v[0] != "403" {
				return q, "deny_status: must be 401 or 403 (the statuses nginx's auth_request passes on), got " + strconv.Quote(v[0])
			}
			q.denyStatus, _ = strconv.Atoi(v[0])
		default:
			return q, strconv.Quote(k) + ": unknown query parameter; the parameters are token, deny_status and route"
		}
	}
	return q, ""
}

// serveAuth is /v1/auth, the forward-auth endpoint of nginx's auth_request, Traefik's
// ForwardAuth and Caddy's forward_auth: any method; the original request is told by the
// gateway's headers (httplimit.ForwardedInput: believed only from trusted_proxies), its route
// by the query's route, believed likewise. It decides
// the request against the running rules, exactly as /v1/check does, and answers:
//
//   - allowed: 200, no body, with the rule's rate-limit headers; a delayed request's answer is
//     held for its delay, so that the gateway holds the request;
//   - denied: the rule's status (429 by default) with its headers, Retry-After and JSON body,
//     as the proxy denies; with deny_status (401 or 403, for nginx, which turns any other status
//     into a 500), that status, and the rule's in X-Diana-Status and its body in X-Diana-Body;
//   - 400 {"error"} for a request that cannot be told reliably, or a bad query string;
//   - 401 {"error"} when admin.token is set and the query has no token=TOKEN, or another one.
//
// Concurrency rules release their lease at once, and usage rules are charged their fallback, as
// with /v1/check.
func (s *Server) serveAuth(w http.ResponseWriter, r *http.Request) {
	q, msg := parseAuthQuery(r.URL.RawQuery)
	if msg != "" {
		s.authProblem(r, "bad_request", msg)
		writeJSON(w, http.StatusBadRequest, errorBody{msg})
		return
	}
	if tok := s.cfg.Admin.Token; tok != "" && subtle.ConstantTimeCompare([]byte(q.token), []byte(tok)) != 1 {
		msg := "missing or wrong token: with admin.token set, call /v1/auth?token=TOKEN"
		s.authProblem(r, "unauthorized", msg)
		writeJSON(w, http.StatusUnauthorized, errorBody{msg})
		return
	}
	l := s.live.Load()
	in, ignored, err := l.opts.ForwardedInput(r)
	if err != nil {
		s.authProblem(r, "bad_request", err.Error())
		writeJSON(w, http.StatusBadRequest, errorBody{err.Error()})
		return
	}
	if q.route != "" {
		if l.opts.TrustedPeer(r) {
			in.Route = q.route
		} else {
			ignored = true
		}
	}
	if ignored {
		s.authProblem(r, "untrusted_peer", "a peer outside trusted_proxies told an original URI, method or route: not believed; "+
			"decided as the request it sent (its own method, host and path, no route) from its own address")
	}
	res := l.engine.Check(r.Context(), &in)
	l.engine.Release(context.WithoutCancel(r.Context()), &res)
	l.engine.Settle(context.WithoutCancel(r.Context()), &res, unseen)
	if !res.Allowed {
		s.logDenial(&in, &res)
		if q.denyStatus == 0 {
			httplimit.Deny(w, &res)
			return
		}
		status, body := res.Denial()
		h := w.Header()
		httplimit.SetHeaders(h, &res)
		h.Set("X-Diana-Status", strconv.Itoa(status))
		h.Set("X-Diana-Body", strings.TrimSuffix(string(body), "\n"))
		h.Set("Content-Type", "application/json; charset=utf-8")
		w.WriteHeader(q.denyStatus)
		w.Write(body)
		return
	}
	if res.Delay > 0 {
		// send_timeout bounds each write, not the hold before the first (timeouts).
		if !httplimit.Wait(r.Context(), time.Duration(res.Delay)*time.Microsecond) {
			return // the gateway went away while held; the reserved units stay spent
		}
	}
	httplimit.SetHeaders(w.Header(), &res)
	w.WriteHeader(http.StatusOK)
}

// addressHeader is httplimit's AddressHeader hook: a trusted peer's address headers are not as
// client_ip_header expects. Counted, and logged at most once a second: it means a proxy that
// passes a client's own address header on (the request was decided by the configured header,
// or the peer's address when that is missing), or a client_ip_header that names the wrong one.
func (s *Server) addressHeader(r *http.Request, problem string) {
	kind, msg := "unexpected", "a trusted proxy sent "+problem+", which client_ip_header does not read: "+
		"if the proxy does not set or clear it, clients choose its value"
	if strings.HasPrefix(problem, "missing ") {
		kind, msg = "missing", "a trusted proxy sent no single valid "+strings.TrimPrefix(problem, "missing ")+
			" (client_ip_header): the proxy's own address counts instead"
	}
	if problem == httplimit.Disagree {
		msg = "a trusted proxy's X-Real-IP names another client than its X-Forwarded-For, which client_ip_header: auto believes: " +
			"set client_ip_header to the one header the proxy sets (nginx setting only X-Real-IP passes the client's own X-Forwarded-For on)"
	}
	s.met.addrHeaders.WithLabelValues(kind).Inc()
	s.limited.LogAttrs(r.Context(), slog.LevelWarn, msg, slog.String("problem", problem), slog.String("peer", r.RemoteAddr))
}

// authProblem counts a forward-auth request that was refused or not believed, and logs it (at
// most one line a second): each means a gateway misconfigured or a caller forging headers. The
// reason is an attribute, not the message: it may quote the caller's query, and each message is
// a kind of line of its own (lograte).
func (s *Server) authProblem(r *http.Request, problem, reason string) {
	s.met.authProblem(problem)
	s.limited.LogAttrs(r.Context(), slog.LevelWarn, "forward auth: request refused or not believed",
		slog.String("problem", problem), slog.String("reason", reason), slog.String("peer", r.RemoteAddr))
}
