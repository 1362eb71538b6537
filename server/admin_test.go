package server

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/diana-gw/diana/internal/redistest"
)

// The admin operations, on a local rule and on a cluster rule in a real redis-server: peek
// spends nothing, bans lists the banned identities, unban lifts a ban and keeps the count, reset
// starts an identity afresh; all need the admin token, and refuse what they do not know.
func TestAdminOperations(t *testing.T) {
	rs := redistest.Start(t)
	ts := startFile(t, header+`  token: s3cret
redis: {addrs: "`+rs.Addr+`"}
rules:
  - name: per-ip
    by: ip
    limit: {algorithm: fixed_window, limit: 2, window: 1h}
    ban: 1h
  - name: shared
    mode: cluster
    by: ip
    limit: {algorithm: fixed_window, limit: 3, window: 1h}
    ban: 1h
`)
	call := func(method, path, body, token string, status int, want string) string {
		t.Helper()
		r, err := do(method, ts.admin+path, "", strings.NewReader(body), token)
		if err != nil {
			t.Fatal(err)
		}
		if r.status != status || !strings.Contains(r.body, want) {
			t.Fatalf("%s %s %s: %d %s; want %d with %q", method, path, body, r.status, r.body, status, want)
		}
		return r.body
	}
	const tok = "s3cret"
	check := func(ip string) {
		call("POST", "/v1/check", `{"client_ip": "`+ip+`"}`, tok, 200, `"allowed"`)
	}
	peek := func(ip string) PeekResponse {
		t.Helper()
		var p PeekResponse
		if err := json.Unmarshal([]byte(call("POST", "/v1/admin/peek", `{"client_ip": "`+ip+`"}`, tok, 200, "")), &p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	remaining := func(ip string) (perIP, shared int64) {
		t.Helper()
		p := peek(ip)
		if len(p.Rules) != 2 || p.Rules[0].Key != "per-ip|"+ip || p.Rules[1].Key != "shared|"+ip || p.Rules[1].Mode != "cluster" {
			t.Fatalf("peek %s: %+v", ip, p)
		}
		return p.Rules[0].Remaining, p.Rules[1].Remaining
	}

	// Peek spends nothing.
	for range 3 {
		if a, b := remaining("192.0.2.1"); a != 1 || b != 2 {
			t.Fatalf("peek of a fresh client: remaining %d, %d; want 1, 2", a, b)
		}
	}
	check("192.0.2.1")
	if a, b := remaining("192.0.2.1"); a != 0 || b != 1 {
		t.Fatalf("peek after a check: remaining %d, %d; want 0, 1", a, b)
	}

	// Ban clients under each rule: a local rule bans on its third request, the cluster rule
	// (one request fewer, as per-ip's denials take nothing from it) on its fourth.
	for _, ip := range []string{"192.0.2.10", "192.0.2.11"} {
		for range 3 {
			check(ip)
		}
	}
	var bans BansResponse
	json.Unmarshal([]byte(call("GET", "/v1/admin/bans?rule=per-ip", "", tok, 200, "")), &bans)
	if len(bans.Bans) != 2 || bans.More || bans.Mode != "local" || bans.Bans[0].Left < 3590 {
		t.Fatalf("bans of per-ip: %+v", bans)
	}
	call("GET", "/v1/admin/bans?rule=per-ip&max=1", "", tok, 200, `"more":true`)
	// The cluster rule's ban, started through Redis.
	rc := rs.Client()
	defer rc.Close()
	for range 4 {
		call("POST", "/v1/check", `{"client_ip": "198.51.100.7", "path": "/"}`, tok, 200, "")
		call("POST", "/v1/admin/reset", `{"rule": "per-ip", "key": "per-ip|198.51.100.7"}`, tok, 200, "")
	}
	call("GET", "/v1/admin/bans?rule=shared", "", tok, 200, `{"rule":"shared","mode":"cluster","bans":[{"key":"shared|198.51.100.7","left":3600}],"more":false}`)

	// Unban lifts the ban, the window stays spent; reset starts afresh.
	call("POST", "/v1/admin/unban", `{"rule": "shared", "key": "shared|198.51.100.7"}`, tok, 200, `"found":true`)
	call("POST", "/v1/admin/unban", `{"rule": "shared", "key": "shared|198.51.100.7"}`, tok, 200, `"found":false`)
	call("GET", "/v1/admin/bans?rule=shared", "", tok, 200, `"bans":[]`)
	if p := peek("198.51.100.7"); p.Rules[1].Allowed || p.Rules[1].Remaining != 0 {
		t.Fatalf("after unban: %+v, want the window spent", p.Rules[1])
	}
	call("POST", "/v1/admin/reset", `{"rule": "shared", "key": "shared|198.51.100.7"}`, tok, 200, `"found":true`)
	call("POST", "/v1/admin/reset", `{"rule": "per-ip", "key": "per-ip|192.0.2.10"}`, tok, 200, `"found":true`)
	if a, b := remaining("198.51.100.7"); b != 2 {
		t.Fatalf("after reset: shared remaining %d, want 2 (per-ip %d)", b, a)
	}
	if a, _ := remaining("192.0.2.10"); a != 1 {
		t.Fatalf("after reset: per-ip remaining %d, want 1", a)
	}

	// Refusals.
	for _, c := range []struct {
		method, path, body, token string
		status                    int
		want                      string
	}{
		{"POST", "/v1/admin/peek", `{}`, "", 401, "bearer token"},
		{"GET", "/v1/admin/bans?rule=per-ip", "", "wrong", 401, "bearer token"},
		{"POST", "/v1/admin/reset", `{"rule": "per-ip", "key": "per-ip|1"}`, "", 401, "bearer token"},
		{"POST", "/v1/admin/peek", `{"clientip": "192.0.2.1"}`, tok, 400, "clientip: unknown field"},
		{"POST", "/v1/admin/peek", `null`, tok, 400, "must be a JSON object"},
		{"POST", "/v1/admin/reset", `{"rule": "nope", "key": "nope|1"}`, tok, 404, `no running rule is named \"nope\"`},
		{"POST", "/v1/admin/reset", `{"rule": "per-ip", "key": "shared|1"}`, tok, 400, "is not an identity of rule"},
		{"POST", "/v1/admin/unban", `{"key": "per-ip|1"}`, tok, 400, "rule: is required"},
		{"POST", "/v1/admin/unban", `{"rule": "per-ip", "key": "per-ip|1", "all": true}`, tok, 400, "all: unknown field; the fields are rule, key"},
		{"GET", "/v1/admin/bans?rule=per-ip&max=0", "", tok, 400, "max: must be an integer from 1 to 100000"},
		{"GET", "/v1/admin/bans?rule=per-ip&limit=5", "", tok, 400, "limit: unknown parameter"},
		{"GET", "/v1/admin/reset", "", tok, 405, ""},
	} {
		call(c.method, c.path, c.body, c.token, c.status, c.want)
	}
}

// Without admin.token, the admin operations are refused: they change and reveal state.
func TestAdminOperationsNeedAToken(t *testing.T) {
	ts := startFile(t, header+"rules:\n  - {name: a, limit: {algorithm: fixed_window, limit: 1, window: 1m}}\n")
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/admin/peek", `{}`},
		{"POST", "/v1/admin/reset", `{"rule": "a", "key": "a"}`},
		{"POST", "/v1/admin/unban", `{"rule": "a", "key": "a"}`},
		{"GET", "/v1/admin/bans?rule=a", ""},
	} {
		r, err := do(c.method, ts.admin+c.path, "", strings.NewReader(c.body), "")
		if err != nil || r.status != 403 || !strings.Contains(r.body, "admin operations need admin.token") {
			t.Errorf("%s %s without a token configured: %v %d %s; want 403", c.method, c.path, err, r.status, r.body)
		}
	}
}
