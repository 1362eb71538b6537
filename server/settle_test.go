package server

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/diana-gw/diana/internal/redistest"
)

// settleConfig is two nodes' config: a cluster usage rule per client IP, with admin.token.
func settleConfig(addr string) string {
	return strings.Replace(clusterConfig(exactTimeout, "1s", `  - name: tokens
    mode: cluster
    by: [ip]
    usage: {body: usage.total_tokens, estimate: 10, fallback: 300}
    limit: {algorithm: fixed_window, limit: 1000, window: 1h}
`, addr), "admin:\n", "admin:\n  token: s3cret\n", 1)
}

// checkSettle posts a /v1/check with "settle": true from ip and returns its usage entries.
func checkSettle(t *testing.T, ts *testServer, ip string) (*CheckResponse, []settleUsage) {
	t.Helper()
	r, res := postCheck(t, ts, `{"client_ip":"`+ip+`","path":"/","settle":true}`, "s3cret")
	if res == nil || !res.Allowed {
		t.Fatalf("check: %d %s", r.status, r.body)
	}
	var u struct {
		Usage []settleUsage `json:"usage"`
	}
	if err := json.Unmarshal([]byte(r.body), &u); err != nil {
		t.Fatal(err)
	}
	return res, u.Usage
}

type settleUsage struct {
	Rule, Header, Body, Ticket string
}

func postSettle(t *testing.T, ts *testServer, body, token string) reply {
	t.Helper()
	r, err := do(http.MethodPost, ts.admin+"/v1/settle", "", strings.NewReader(body), token)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestSettle: a /v1/check with "settle": true reserves the estimate and hands out a ticket,
// and POST /v1/settle charges the actual cost (a debit beyond the estimate, a credit below it,
// the fallback for an unread usage) exactly in Redis, on any node sharing admin.token.
func TestSettle(t *testing.T) {
	rs := redistest.Start(t)
	rc := rs.Client()
	a, b := startFile(t, settleConfig(rs.Addr)), startFile(t, settleConfig(rs.Addr))
	const ip = "192.0.2.7"
	id := "tokens|" + ip

	res, us := checkSettle(t, a, ip)
	if len(us) != 1 || us[0].Rule != "tokens" || us[0].Body != "usage.total_tokens" || us[0].Header != "" || us[0].Ticket == "" {
		t.Fatalf("usage %+v", us)
	}
	if res.Remaining != 990 || stored(t, a, rc, "tokens", id) != 10 {
		t.Fatalf("after the check: remaining %d, Redis %d; want the estimate 10 reserved", res.Remaining, stored(t, a, rc, "tokens", id))
	}
	if got := metric(t, a, `diana_usage_unread_total{reason="missing",rule="tokens"}`); got != 0 {
		t.Fatalf("a check that settles later counted %v unread", got)
	}
	steps := []struct {
		name   string
		node   *testServer
		settle string // the entry, %T the ticket
		want   int64  // Redis's count after it
		tokens float64
		unread float64
	}{
		{"debit beyond the estimate", b, `{"ticket":"%T","cost":50}`, 50, 50, 0},
		{"credit below the estimate", a, `{"ticket":"%T","cost":4}`, 54, 54, 0},
		{"unread: the fallback", b, `{"ticket":"%T","unread":"usage missing: the stream was cut"}`, 354, 354, 1},
	}
	ticket := us[0].Ticket
	for i, st := range steps {
		if i > 0 {
			_, us = checkSettle(t, a, ip)
			ticket = us[0].Ticket
		}
		r := postSettle(t, st.node, `{"settle":[`+strings.Replace(st.settle, "%T", ticket, 1)+`]}`, "s3cret")
		if r.status != 204 {
			t.Fatalf("%s: %d %s", st.name, r.status, r.body)
		}
		if n := stored(t, a, rc, "tokens", id); n != st.want {
			t.Errorf("%s: Redis counts %d, want %d", st.name, n, st.want)
		}
		if got := metric(t, st.node, `diana_usage_tokens_total{rule="tokens"}`) + metric(t, otherNode(st.node, a, b), `diana_usage_tokens_total{rule="tokens"}`); got != st.tokens {
			t.Errorf("%s: diana_usage_tokens_total %v, want %v", st.name, got, st.tokens)
		}
		if got := metric(t, b, `diana_usage_unread_total{reason="missing",rule="tokens"}`); got != st.unread {
			t.Errorf("%s: unread %v, want %v", st.name, got, st.unread)
		}
	}
}

func otherNode(ts, a, b *testServer) *testServer {
	if ts == a {
		return b
	}
	return a
}

// TestSettleBadRequests: /v1/settle takes the token as /v1/check does, and refuses a bad body
// with a 400 naming the field, settling nothing.
func TestSettleBadRequests(t *testing.T) {
	rs := redistest.Start(t)
	rc := rs.Client()
	ts := startFile(t, settleConfig(rs.Addr))
	_, us := checkSettle(t, ts, "192.0.2.8")
	tk := us[0].Ticket
	payload, mac, _ := strings.Cut(tk, ".")
	forged := payload[:len(payload)-2] + "AA." + mac
	for _, tc := range []struct {
		name, body, token string
		status            int
		want              string
	}{
		{"no token", `{"settle":[]}`, "", 401, "bearer token"},
		{"wrong token", `{"settle":[]}`, "s3cre", 401, "bearer token"},
		{"empty", ``, "s3cret", 400, "JSON object of the fields settle"},
		{"no settle", `{}`, "s3cret", 400, "settle: "},
		{"unknown field", `{"settle":[],"x":1}`, "s3cret", 400, "x: unknown field"},
		{"no ticket", `{"settle":[{"cost":1}]}`, "s3cret", 400, "settle[0].ticket: "},
		{"negative cost", `{"settle":[{"ticket":"` + tk + `","cost":-1}]}`, "s3cret", 400, "settle[0].cost: "},
		{"huge cost", `{"settle":[{"ticket":"` + tk + `","cost":1000000000000001}]}`, "s3cret", 400, "settle[0].cost: "},
		{"fractional cost", `{"settle":[{"ticket":"` + tk + `","cost":1.5}]}`, "s3cret", 400, "settle[0].cost: "},
		{"cost and unread", `{"settle":[{"ticket":"` + tk + `","cost":1,"unread":"x"}]}`, "s3cret", 400, "settle[0].cost: give one of"},
		{"neither", `{"settle":[{"ticket":"` + tk + `"}]}`, "s3cret", 400, "settle[0].cost: give one of"},
		{"not a ticket", `{"settle":[{"ticket":"abc","cost":1}]}`, "s3cret", 400, "settle[0].ticket: not a ticket"},
		{"forged", `{"settle":[{"ticket":"` + forged + `","cost":0}]}`, "s3cret", 400, "settle[0].ticket: signature does not match"},
		{"second forged", `{"settle":[{"ticket":"` + tk + `","cost":0},{"ticket":"` + forged + `","cost":0}]}`, "s3cret", 400, "settle[1].ticket: signature"},
		{"too large", `{"settle":[{"ticket":"` + strings.Repeat("a", 70<<10) + `","cost":0}]}`, "s3cret", 400, "larger than 64 KiB"},
	} {
		r := postSettle(t, ts, tc.body, tc.token)
		if r.status != tc.status || !strings.Contains(r.body, tc.want) {
			t.Errorf("%s: %d %s, want %d with %q", tc.name, r.status, r.body, tc.status, tc.want)
		}
	}
	if n := stored(t, ts, rc, "tokens", "tokens|192.0.2.8"); n != 10 {
		t.Errorf("Redis counts %d after refused settlements, want the estimate 10", n)
	}
	// A ticket from a dianad with another token does not settle here.
	other := startFile(t, strings.Replace(settleConfig(rs.Addr), "s3cret", "other", 1))
	if r := postSettle(t, other, `{"settle":[{"ticket":"`+tk+`","cost":0}]}`, "other"); r.status != 400 || !strings.Contains(r.body, "signature") {
		t.Errorf("another token's node: %d %s", r.status, r.body)
	}
}

// TestSettleWithoutToken: without admin.token, tickets are signed with a key drawn at start and
// settle on the node; an unread reason names the metric's class; a denied check hands out no
// ticket.
func TestSettleWithoutToken(t *testing.T) {
	ts := startFile(t, header+`rules:
  - name: tokens
    by: [ip]
    usage: {header: x-usage, estimate: 600, fallback: 700}
    limit: {algorithm: fixed_window, limit: 1000, window: 1h}
`)
	r, res := postCheck(t, ts, `{"client_ip":"192.0.2.9","settle":true}`, "")
	var u struct{ Usage []settleUsage }
	if res == nil || json.Unmarshal([]byte(r.body), &u) != nil || len(u.Usage) != 1 || u.Usage[0].Header != "x-usage" {
		t.Fatalf("check: %d %s", r.status, r.body)
	}
	if r := postSettle(t, ts, `{"settle":[{"ticket":"`+u.Usage[0].Ticket+`","unread":"usage value invalid: -5"}]}`, ""); r.status != 204 {
		t.Fatalf("settle: %d %s", r.status, r.body)
	}
	if got := metric(t, ts, `diana_usage_unread_total{reason="value",rule="tokens"}`); got != 1 {
		t.Errorf("unread{reason=value} %v, want 1", got)
	}
	if got := metric(t, ts, `diana_usage_tokens_total{rule="tokens"}`); got != 700 {
		t.Errorf("tokens %v, want the fallback 700", got)
	}
	r, res = postCheck(t, ts, `{"client_ip":"192.0.2.9","settle":true}`, "")
	if res == nil || res.Allowed || strings.Contains(r.body, `"usage"`) {
		t.Errorf("a denied check: %d %s, want no usage", r.status, r.body)
	}
}

// TestSettleReplay: a ticket settles once across the nodes sharing Redis: settled on one node,
// replayed on the other (or the same) it is refused with 409, counted and not charged again; in a
// request of several, the fresh entries settle and the replays are named.
func TestSettleReplay(t *testing.T) {
	rs := redistest.Start(t)
	rc := rs.Client()
	a, b := startFile(t, settleConfig(rs.Addr)), startFile(t, settleConfig(rs.Addr))
	const ip = "192.0.2.10"
	id := "tokens|" + ip
	_, us := checkSettle(t, a, ip)
	first := us[0].Ticket
	if r := postSettle(t, a, `{"settle":[{"ticket":"`+first+`","cost":50}]}`, "s3cret"); r.status != 204 {
		t.Fatalf("settle on a: %d %s", r.status, r.body)
	}
	if n := stored(t, a, rc, "tokens", id); n != 50 {
		t.Fatalf("Redis counts %d after the settlement, want 50", n)
	}
	_, us = checkSettle(t, a, ip) // reserves 10 more: 60
	second := us[0].Ticket
	for _, tc := range []struct {
		name    string
		node    *testServer
		body    string
		status  int
		refused []int
		want    int64 // Redis's count after it
	}{
		{"replay on b", b, `{"settle":[{"ticket":"` + first + `","cost":500}]}`, 409, []int{0}, 60},
		{"replay on a, as unread", a, `{"settle":[{"ticket":"` + first + `","unread":"usage missing"}]}`, 409, []int{0}, 60},
		{"a fresh one and a replay", b, `{"settle":[{"ticket":"` + second + `","cost":30},{"ticket":"` + first + `","cost":7}]}`, 409, []int{1}, 80},
		{"the same twice in one request", a, `{"settle":[{"ticket":"` + second + `","cost":1},{"ticket":"` + second + `","cost":1}]}`, 409, []int{0, 1}, 80},
	} {
		r := postSettle(t, tc.node, tc.body, "s3cret")
		var got struct {
			Error   string
			Refused []int
		}
		if err := json.Unmarshal([]byte(r.body), &got); err != nil || r.status != tc.status || fmt.Sprint(got.Refused) != fmt.Sprint(tc.refused) ||
			!strings.Contains(got.Error, fmt.Sprintf("settle[%d].ticket: settled before", tc.refused[0])) {
			t.Errorf("%s: %d %s, want %d refusing %v", tc.name, r.status, r.body, tc.status, tc.refused)
		}
		if n := stored(t, a, rc, "tokens", id); n != tc.want {
			t.Errorf("%s: Redis counts %d, want %d", tc.name, n, tc.want)
		}
	}
	if got := metric(t, a, `diana_settle_refused_total{reason="replay"}`) + metric(t, b, `diana_settle_refused_total{reason="replay"}`); got != 5 {
		t.Errorf("diana_settle_refused_total{reason=replay} %v on the two nodes, want 5", got)
	}
	if got := metric(t, a, `diana_usage_tokens_total{rule="tokens"}`) + metric(t, b, `diana_usage_tokens_total{rule="tokens"}`); got != 80 {
		t.Errorf("diana_usage_tokens_total %v, want 80 (50 and 30, each once)", got)
	}
	// The record lives as long as the ticket could still be settled, and no longer.
	keys, err := rc.Keys(context.Background(), "diana:settled:*").Result()
	if err != nil || len(keys) != 2 {
		t.Fatalf("records %v (%v), want the two tickets'", keys, err)
	}
	for _, k := range keys {
		if ttl := rc.PTTL(context.Background(), k).Val(); ttl <= 59*time.Minute || ttl > time.Hour {
			t.Errorf("%s lives %v more, want the ticket's remaining life, just under an hour", k, ttl)
		}
	}
}

// TestSettleReplayLocal: without Redis, the node records the tickets it settled: a replay is
// refused with 409; at the record's bound a new ticket is refused with 503 and not settled,
// nothing recorded is forgotten.
func TestSettleReplayLocal(t *testing.T) {
	ts := startFile(t, strings.Replace(header, "admin:\n", "admin:\n  token: s3cret\n", 1)+`rules:
  - name: tokens
    by: [ip]
    usage: {header: x-usage, estimate: 10, fallback: 300}
    limit: {algorithm: fixed_window, limit: 1000, window: 1h}
`)
	ts.settledLocal.mu.Lock()
	ts.settledLocal.max = 2
	ts.settledLocal.mu.Unlock()
	const ip = "192.0.2.11"
	var tickets []string
	for range 3 {
		_, us := checkSettle(t, ts, ip)
		tickets = append(tickets, us[0].Ticket)
	}
	remaining := func() int64 {
		t.Helper()
		r, err := do(http.MethodPost, ts.admin+"/v1/admin/peek", "", strings.NewReader(`{"client_ip":"`+ip+`"}`), "s3cret")
		var p struct{ Rules []struct{ Remaining int64 } }
		if err != nil || json.Unmarshal([]byte(r.body), &p) != nil || len(p.Rules) != 1 {
			t.Fatalf("peek: %v %d %s", err, r.status, r.body)
		}
		return p.Rules[0].Remaining + 1 // peek's remaining is after a request of cost 1
	}
	settle := func(tk string) reply {
		return postSettle(t, ts, `{"settle":[{"ticket":"`+tk+`","cost":100}]}`, "s3cret")
	}
	for i, st := range []struct {
		ticket    int
		status    int
		want      string
		remaining int64 // of the 1000, after it
	}{
		{0, 204, "", 1000 - 100 - 10 - 10},
		{0, 409, "settle[0].ticket: settled before", 880},
		{1, 204, "", 1000 - 100 - 100 - 10},
		{2, 503, "settle[0].ticket: this node's record of settled tickets is full", 790},
		{1, 409, "settle[0].ticket: settled before", 790},
	} {
		r := settle(tickets[st.ticket])
		if r.status != st.status || !strings.Contains(r.body, st.want) {
			t.Errorf("step %d: %d %s, want %d with %q", i, r.status, r.body, st.status, st.want)
		}
		if got := remaining(); got != st.remaining {
			t.Errorf("step %d: remaining %d, want %d", i, got, st.remaining)
		}
	}
	for reason, want := range map[string]float64{"replay": 2, "record_full": 1} {
		if got := metric(t, ts, `diana_settle_refused_total{reason="`+reason+`"}`); got != want {
			t.Errorf("diana_settle_refused_total{reason=%s} %v, want %v", reason, got, want)
		}
	}
}

// TestTicketRecord: the local record refuses a replay while its ticket lives, refuses a new
// ticket when full, and makes room by dropping expired tickets only.
func TestTicketRecord(t *testing.T) {
	r := ticketRecord{max: 2}
	for i, st := range []struct {
		id       byte
		exp, now int64
		want     error
	}{
		{'a', 100, 0, nil},
		{'a', 100, 50, errReplay},
		{'b', 300, 60, nil},
		{'c', 400, 70, errRecordFull}, // full, nothing expired
		{'c', 400, 99, errRecordFull},
		{'c', 400, 100, nil}, // a expired: its room is taken
		{'b', 300, 150, errReplay},
		{'d', 500, 200, errRecordFull},
		{'a', 600, 250, errRecordFull}, // a's record is gone, and no room: refused, not settled
		{'d', 500, 300, nil},
		{'c', 400, 300, errReplay},
	} {
		if got := r.add([16]byte{st.id}, st.exp, st.now); got != st.want {
			t.Errorf("step %d: add(%c, %d, %d) = %v, want %v", i, st.id, st.exp, st.now, got, st.want)
		}
		if len(r.until) > r.max {
			t.Fatalf("step %d: %d recorded, over the bound %d", i, len(r.until), r.max)
		}
	}
}

// TestSettleReplayRedisDown: while Redis does not answer, the node records the tickets it settles
// in its memory: a replay to it is still refused.
func TestSettleReplayRedisDown(t *testing.T) {
	rs := redistest.Start(t)
	ts := startFile(t, strings.Replace(clusterConfig(faultTimeout, "1s", `  - name: tokens
    mode: cluster
    on_error: local
    by: [ip]
    usage: {body: usage.total_tokens, estimate: 10, fallback: 300}
    limit: {algorithm: fixed_window, limit: 1000, window: 1h}
`, rs.Addr), "admin:\n", "admin:\n  token: s3cret\n", 1))
	_, us := checkSettle(t, ts, "192.0.2.12")
	body := `{"settle":[{"ticket":"` + us[0].Ticket + `","cost":5}]}`
	rs.Pause()
	defer rs.Resume()
	if r := postSettle(t, ts, body, "s3cret"); r.status != 204 {
		t.Fatalf("settle with Redis paused: %d %s", r.status, r.body)
	}
	if r := postSettle(t, ts, body, "s3cret"); r.status != 409 || !strings.Contains(r.body, "settled before") {
		t.Errorf("replay with Redis paused: %d %s, want 409", r.status, r.body)
	}
	if got := metric(t, ts, `diana_settle_refused_total{reason="replay"}`); got != 1 {
		t.Errorf("diana_settle_refused_total{reason=replay} %v, want 1", got)
	}
}

// TestTicketRecordMemory: a full local record of settled tickets holds about 55 MB of heap, 51–53
// bytes a ticket, as docs/api.md states.
func TestTicketRecordMemory(t *testing.T) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	r := ticketRecord{max: maxRecorded}
	for i := range maxRecorded {
		var id [16]byte
		binary.LittleEndian.PutUint64(id[:], uint64(i)*0x9E3779B97F4A7C15)
		binary.LittleEndian.PutUint64(id[8:], uint64(i))
		if err := r.add(id, 1<<40, 0); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / maxRecorded
	t.Logf("%d tickets: %.1f MB, %.1f bytes each", len(r.until), float64(after.HeapAlloc-before.HeapAlloc)/1e6, per)
	if per > 64 {
		t.Errorf("%.1f bytes a ticket, more than docs/api.md's bound allows", per)
	}
	runtime.KeepAlive(&r)
}
