package server

import (
	"encoding/json"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// postCheck posts body to /v1/check and decodes a 200 reply.
func postCheck(t *testing.T, ts *testServer, body, token string) (reply, *CheckResponse) {
	t.Helper()
	r, err := do(http.MethodPost, ts.admin+"/v1/check", "", strings.NewReader(body), token)
	if err != nil {
		t.Fatal(err)
	}
	if r.status != 200 {
		return r, nil
	}
	var res CheckResponse
	if err := json.Unmarshal([]byte(r.body), &res); err != nil {
		t.Fatalf("/v1/check reply %q: %v", r.body, err)
	}
	return r, &res
}

// CheckResponse is /v1/check's reply as docs/api.md states it, read by encoding/json: an
// independent reader of what shared/check writes.
type CheckResponse struct {
	Allowed    bool              `json:"allowed"`
	Rule       string            `json:"rule"`
	Status     int               `json:"status"`
	Limit      int64             `json:"limit"`
	Remaining  int64             `json:"remaining"`
	Reset      int64             `json:"reset"`
	RetryAfter *int64            `json:"retry_after"`
	DelayMS    int64             `json:"delay_ms"`
	Headers    map[string]string `json:"headers"`
	Body       string            `json:"body"`
	Unlimited  string            `json:"unlimited,omitempty"`
}

func ptr(v int64) *int64 { return &v }

// An unlimited rule exempts what it matches from every rule, says so in the reply and counts it
// in diana_decisions_total; a request outside it, or in its exception, is limited. A request
// without the header a rule counts by is counted by its address.
func TestCheckUnlimited(t *testing.T) {
	ts := startFile(t, header+`rules:
  - name: per-key
    by: ["header:X-Api-Key"]
    limit: {algorithm: fixed_window, limit: 1, window: 1h}
  - name: internal
    unlimited: true
    match: {clients: ["10.0.0.0/8"], not: {paths: ["/login"]}}
`)
	for i := 0; i < 3; i++ {
		if _, res := postCheck(t, ts, `{"client_ip":"10.1.2.3","path":"/x"}`, ""); res == nil || !res.Allowed || res.Unlimited != "internal" || res.Rule != "" || len(res.Headers) != 0 {
			t.Fatalf("exempt request %d: %+v, want allowed by the unlimited rule internal, with no headers", i+1, res)
		}
	}
	for _, tc := range []struct{ body, who string }{
		{`{"client_ip":"10.1.2.3","path":"/login"}`, "the exception"},
		{`{"client_ip":"192.0.2.1","path":"/x"}`, "a client outside the block, without the header"},
		{`{"client_ip":"192.0.2.1","path":"/x","headers":{"X-Api-Key":"k"}}`, "a key"},
	} {
		if _, res := postCheck(t, ts, tc.body, ""); res == nil || !res.Allowed || res.Rule != "per-key" || res.Unlimited != "" {
			t.Fatalf("%s, first request: %+v, want allowed by per-key", tc.who, res)
		}
		if _, res := postCheck(t, ts, tc.body, ""); res == nil || res.Allowed {
			t.Errorf("%s, second request: %+v, want denied by per-key", tc.who, res)
		}
	}
	if got := metric(t, ts, `diana_decisions_total{result="unlimited",rule="internal"}`); got != 3 {
		t.Errorf("unlimited decisions = %v, want 3", got)
	}
}

func TestCheck(t *testing.T) {
	ts := startFile(t, header+`rules:
  - name: per-ip
    by: [ip]
    limit: {algorithm: token_bucket, rate: 2, period: 1h}
    reply: {legacy_headers: true}
  - name: per-key
    match: {headers: {X-Api-Key: "*"}}
    by: ["header:X-Api-Key"]
    limit: {algorithm: token_bucket, rate: 1, period: 1h}
    reply: {status: 503, message: "slow down"}
  - name: heavy
    match: {paths: ["/heavy"]}
    cost: 10
    limit: {algorithm: token_bucket, rate: 5, period: 1s}
`)
	const ip = `"client_ip":"192.0.2.1"`
	tests := []struct {
		name string
		body string
		want CheckResponse
	}{
		{"first", `{` + ip + `,"method":"GET","path":"/"}`, CheckResponse{
			Allowed: true, Rule: "per-ip", Status: 200, Limit: 2, Remaining: 1, Reset: 1800, RetryAfter: ptr(0),
			Headers: map[string]string{"Ratelimit-Limit": "2", "Ratelimit-Remaining": "1", "Ratelimit-Reset": "1800",
				"X-Ratelimit-Limit": "2", "X-Ratelimit-Remaining": "1"},
		}},
		{"second", `{` + ip + `}`, CheckResponse{
			Allowed: true, Rule: "per-ip", Status: 200, Limit: 2, Remaining: 0, Reset: 3600, RetryAfter: ptr(0),
			Headers: map[string]string{"Ratelimit-Limit": "2", "Ratelimit-Remaining": "0", "Ratelimit-Reset": "3600",
				"X-Ratelimit-Limit": "2", "X-Ratelimit-Remaining": "0"},
		}},
		{"denied", `{` + ip + `}`, CheckResponse{
			Allowed: false, Rule: "per-ip", Status: 429, Limit: 2, Remaining: 0, Reset: 3600, RetryAfter: ptr(1800),
			Headers: map[string]string{"Ratelimit-Limit": "2", "Ratelimit-Remaining": "0", "Ratelimit-Reset": "3600",
				"X-Ratelimit-Limit": "2", "X-Ratelimit-Remaining": "0", "Retry-After": "1800"},
			Body: `{"message":"API rate limit exceeded","retry_after":1800}` + "\n",
		}},
		{"header names ignore case", `{"client_ip":"192.0.2.2","headers":{"x-api-key":"k1"}}`, CheckResponse{
			Allowed: true, Rule: "per-key", Status: 200, Limit: 1, Remaining: 0, Reset: 3600, RetryAfter: ptr(0),
			Headers: map[string]string{"Ratelimit-Limit": "1", "Ratelimit-Remaining": "0", "Ratelimit-Reset": "3600"},
		}},
		{"rule status and message", `{"client_ip":"192.0.2.3","headers":{"X-API-KEY":"k1"}}`, CheckResponse{
			Allowed: false, Rule: "per-key", Status: 503, Limit: 1, Remaining: 0, Reset: 3600, RetryAfter: ptr(3600),
			Headers: map[string]string{"Ratelimit-Limit": "1", "Ratelimit-Remaining": "0", "Ratelimit-Reset": "3600", "Retry-After": "3600"},
			Body:    `{"message":"slow down","retry_after":3600}` + "\n",
		}},
		{"never passes", `{"path":"/heavy"}`, CheckResponse{
			Allowed: false, Rule: "heavy", Status: 429, Limit: 5, Remaining: 5, RetryAfter: nil,
			Headers: map[string]string{"Ratelimit-Limit": "5", "Ratelimit-Remaining": "5", "Ratelimit-Reset": "0"},
			Body:    `{"message":"API rate limit exceeded","retry_after":null}` + "\n",
		}},
		{"another client", `{"client_ip":"192.0.2.9","path":"/","method":"GET"}`, CheckResponse{
			Allowed: true, Rule: "per-ip", Status: 200, Limit: 2, Remaining: 1, Reset: 1800, RetryAfter: ptr(0),
			Headers: map[string]string{"Ratelimit-Limit": "2", "Ratelimit-Remaining": "1", "Ratelimit-Reset": "1800",
				"X-Ratelimit-Limit": "2", "X-Ratelimit-Remaining": "1"},
		}},
		// Requests without an address share one count of per-ip: never unlimited.
		{"no address", `{}`, CheckResponse{
			Allowed: true, Rule: "per-ip", Status: 200, Limit: 2, Remaining: 1, Reset: 1800, RetryAfter: ptr(0),
			Headers: map[string]string{"Ratelimit-Limit": "2", "Ratelimit-Remaining": "1", "Ratelimit-Reset": "1800",
				"X-Ratelimit-Limit": "2", "X-Ratelimit-Remaining": "1"},
		}},
		{"no address again", `{"path":"/other"}`, CheckResponse{
			Allowed: true, Rule: "per-ip", Status: 200, Limit: 2, Remaining: 0, Reset: 3600, RetryAfter: ptr(0),
			Headers: map[string]string{"Ratelimit-Limit": "2", "Ratelimit-Remaining": "0", "Ratelimit-Reset": "3600",
				"X-Ratelimit-Limit": "2", "X-Ratelimit-Remaining": "0"},
		}},
	}
	for _, tt := range tests {
		r, got := postCheck(t, ts, tt.body, "")
		if got == nil {
			t.Fatalf("%s: status %d %s", tt.name, r.status, r.body)
		}
		settle(got, &tt.want)
		if !reflect.DeepEqual(*got, tt.want) {
			t.Errorf("%s:\n got %s\nwant %s", tt.name, jsonString(got), jsonString(&tt.want))
		}
	}
}

// settle makes got's reset and retry_after (and their headers) equal want's when they are at
// most a minute short of them: seconds pass between the checks on a slow machine.
func settle(got, want *CheckResponse) {
	near := func(g, w int64) bool { return g <= w && g >= w-60 }
	if near(got.Reset, want.Reset) && got.Headers["Ratelimit-Reset"] == strconv.FormatInt(got.Reset, 10) {
		got.Reset = want.Reset
		if _, ok := want.Headers["Ratelimit-Reset"]; ok {
			got.Headers["Ratelimit-Reset"] = want.Headers["Ratelimit-Reset"]
		}
	}
	if got.RetryAfter != nil && want.RetryAfter != nil && near(*got.RetryAfter, *want.RetryAfter) {
		ra := strconv.FormatInt(*got.RetryAfter, 10)
		if h, ok := got.Headers["Retry-After"]; ok && h == ra {
			got.Headers["Retry-After"] = want.Headers["Retry-After"]
		}
		got.Body = strings.Replace(got.Body, `"retry_after":`+ra+"}", `"retry_after":`+strconv.FormatInt(*want.RetryAfter, 10)+"}", 1)
		got.RetryAfter = want.RetryAfter
	}
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestCheckBadRequests(t *testing.T) {
	ts := startFile(t, header+`rules:
  - name: all
    limit: {algorithm: fixed_window, limit: 100, window: 1h}
`)
	tests := []struct {
		name, method, body string
		status             int
		errPart            string
	}{
		{"not JSON", "POST", `{"method":`, 400, "not valid JSON"},
		{"empty body", "POST", ``, 400, "must be a JSON object of the fields method, host, path, client_ip, consumer, route, headers, repeated, settle, got nothing"},
		{"null", "POST", `null`, 400, "must be a JSON object of the fields method, host, path, client_ip, consumer, route, headers, repeated, settle, got null"},
		{"not an object", "POST", `[1]`, 400, "must be a JSON object"},
		{"unknown field", "POST", `{"path": "/", "clientip": "192.0.2.1"}`, 400, "clientip: unknown field; the fields are method, host, path"},
		{"two objects", "POST", `{"path": "/"} {"path": "/"}`, 400, "only whitespace may follow"},
		{"wrong field type", "POST", `{"path":1}`, 400, "path: must be a string"},
		{"wrong headers type", "POST", `{"headers":["a"]}`, 400, "headers: must be an object of strings, got a list"},
		{"wrong header value", "POST", `{"headers":{"A":1}}`, 400, "headers.A: must be a string, got the number 1"},
		{"duplicate field", "POST", `{"path":"/","path":"/x"}`, 400, `duplicate key "path"`},
		{"bad client_ip", "POST", `{"client_ip":"nope"}`, 400, "client_ip: not an IP address"},
		{"too large", "POST", `{"path":"` + strings.Repeat("a", 64<<10) + `"}`, 400, "larger than 64 KiB"},
		{"GET", "GET", ``, 405, "use POST"},
	}
	for _, tt := range tests {
		r, err := do(tt.method, ts.admin+"/v1/check", "", strings.NewReader(tt.body), "")
		if err != nil {
			t.Fatal(err)
		}
		var e struct{ Error string }
		if r.status != tt.status || json.Unmarshal([]byte(r.body), &e) != nil || !strings.Contains(e.Error, tt.errPart) {
			t.Errorf("%s: %d %s; want %d with an error containing %q", tt.name, r.status, r.body, tt.status, tt.errPart)
		}
	}
}

func TestCheckToken(t *testing.T) {
	ts := startFile(t, `version: 1
listen: ""
admin:
  listen: "127.0.0.1:0"
  token: "s3cret"
rules:
  - name: all
    limit: {algorithm: fixed_window, limit: 100, window: 1h}
`)
	if ts.proxy != "" {
		t.Fatalf("listen \"\" should run no proxy, got %s", ts.proxy)
	}
	tests := []struct {
		name, token string
		status      int
	}{
		{"no token", "", 401},
		{"wrong token", "s3cre", 401},
		{"right token", "s3cret", 200},
	}
	for _, tt := range tests {
		r, _ := postCheck(t, ts, `{}`, tt.token)
		if r.status != tt.status {
			t.Errorf("%s: %d %s, want %d", tt.name, r.status, r.body, tt.status)
		}
		if tt.status == 401 && !strings.Contains(r.body, `"error"`) {
			t.Errorf("%s: body %s, want a JSON error", tt.name, r.body)
		}
	}
	// The metrics and the health check need no token.
	if r := get(t, ts.admin+"/healthz", ""); r.status != 200 {
		t.Errorf("/healthz: %d", r.status)
	}
}
