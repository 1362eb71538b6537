package check

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/diana-gw/diana/shared/usage"
)

// wireRequest and wireResponse are the wire format as docs/api.md states it, read by
// encoding/json: an independent reader of what AppendJSON writes.
type wireRequest struct {
	Method   string            `json:"method"`
	Host     string            `json:"host"`
	Path     string            `json:"path"`
	ClientIP string            `json:"client_ip"`
	Consumer string            `json:"consumer"`
	Route    string            `json:"route"`
	Headers  map[string]string `json:"headers"`
	Settle   bool              `json:"settle"`
}

type wireResponse struct {
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
	Unlimited  string            `json:"unlimited"`
}

// TestRequestFields ties requestFields to the documented wire format.
func TestRequestFields(t *testing.T) {
	var names []string
	rt := reflect.TypeFor[wireRequest]()
	for i := range rt.NumField() {
		names = append(names, rt.Field(i).Tag.Get("json"))
	}
	if got := strings.Join(names, ", "); got != requestFields {
		t.Fatalf("requestFields = %q, the wire format has %q", requestFields, got)
	}
}

// randString returns a string of random bytes, often invalid UTF-8, quotes, backslashes and
// control characters: what a client may put in a header.
func randString(r *rand.Rand) string {
	const alphabet = "aZ09 \"\\/\x00\x1f\x7f\x80\xff\xc3\xa9\xe2\x82\xac{}:,"
	b := make([]byte, r.IntN(12))
	for i := range b {
		if r.IntN(4) == 0 {
			b[i] = byte(r.IntN(256))
		} else {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
	}
	return string(b)
}

// valid is s as JSON carries it: invalid UTF-8 becomes U+FFFD.
func valid(s string) string {
	var b strings.Builder
	for _, r := range s { // ranging over a string yields U+FFFD for each invalid byte
		b.WriteRune(r)
	}
	return b.String()
}

func TestRequestRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 5000 {
		req := Request{Method: randString(r), Host: randString(r), Path: randString(r),
			ClientIP: randString(r), Consumer: randString(r), Route: randString(r)}
		seen := map[string]bool{}
		for range r.IntN(4) {
			k := randString(r)
			if !seen[valid(k)] { // a JSON object holds each name once
				seen[valid(k)] = true
				req.Headers = append(req.Headers, [2]string{k, randString(r)})
			}
		}
		body := req.AppendJSON(nil, 1<<16)
		got, err := ParseRequest(body)
		if err != nil {
			t.Fatalf("%d: %q does not parse: %v", i, body, err)
		}
		want := Request{Method: valid(req.Method), Host: valid(req.Host), Path: valid(req.Path),
			ClientIP: valid(req.ClientIP), Consumer: valid(req.Consumer), Route: valid(req.Route)}
		for _, kv := range req.Headers {
			want.Headers = append(want.Headers, [2]string{valid(kv[0]), valid(kv[1])})
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%d: %q read back as %+v, want %+v", i, body, got, want)
		}
		var w wireRequest
		if err := json.Unmarshal(body, &w); err != nil {
			t.Fatalf("%d: encoding/json cannot read %q: %v", i, body, err)
		}
		if w.Path != want.Path || w.ClientIP != want.ClientIP || len(w.Headers) != len(want.Headers) {
			t.Fatalf("%d: encoding/json reads %q as %+v, want %+v", i, body, w, want)
		}
	}
}

// TestRequestBound: headers past max are left out, and the body stays within max.
func TestRequestBound(t *testing.T) {
	req := Request{Path: "/", ClientIP: "192.0.2.1"}
	for i := range 100 {
		req.Headers = append(req.Headers, [2]string{"x-h" + strings.Repeat("a", i), strings.Repeat("v", 50)})
	}
	for _, max := range []int{100, 1000, 4000} {
		body := req.AppendJSON(nil, max)
		if len(body) > max {
			t.Errorf("max %d: body of %d bytes", max, len(body))
		}
		got, err := ParseRequest(body)
		if err != nil || got.ClientIP != "192.0.2.1" {
			t.Errorf("max %d: %v, %+v", max, err, got)
		}
	}
}

func TestParseRequestErrors(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{``, "the body must be a JSON object of the fields method, host, path, client_ip, consumer, route, headers, settle, got nothing"},
		{`null`, "the body must be a JSON object of the fields method, host, path, client_ip, consumer, route, headers, settle, got null"},
		{`[1]`, "must be a JSON object"},
		{`{"method":`, "the body is not valid JSON"},
		{`{"path": "/", "clientip": "192.0.2.1"}`, "clientip: unknown field; the fields are method, host, path"},
		{`{"path": "/"} {"path": "/"}`, "the body is not valid JSON"},
		{`{"path":1}`, "path: must be a string, got the number 1"},
		{`{"path":null}`, ""}, // null reads as absent
		{`{"headers":["a"]}`, "headers: must be an object of strings, got a list"},
		{`{"headers":{"A":1}}`, "headers.A: must be a string, got the number 1"},
		{`{"path":"/","path":"/x"}`, "duplicate"},
		{"{\"path\":\"\xff\"}", ""}, // read as U+FFFD
	} {
		_, err := ParseRequest([]byte(tc.body))
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.body, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.body, err, tc.want)
		}
	}
}

func TestResponseRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 2000 {
		res := Response{Allowed: r.IntN(2) == 0, Rule: randString(r), Limit: r.Int64(), Remaining: r.Int64N(100),
			Reset: r.Int64N(1 << 40), RetryAfter: r.Int64N(100) - 10, DelayMS: r.Int64N(5000),
			Body: randString(r), Unlimited: randString(r)}
		res.Status = 200
		if !res.Allowed {
			res.Status = 400 + r.IntN(200)
		}
		if res.RetryAfter < 0 {
			res.RetryAfter = -1
		}
		for j := range r.IntN(5) {
			res.Headers = append(res.Headers, [2]string{"H" + string(rune('a'+j)), randString(r)})
		}
		body := res.AppendJSON(nil)
		got, err := ParseResponse(body)
		if err != nil {
			t.Fatalf("%d: %q does not parse: %v", i, body, err)
		}
		want := res
		want.Rule, want.Body, want.Unlimited = valid(res.Rule), valid(res.Body), valid(res.Unlimited)
		want.Headers = nil
		for _, kv := range res.Headers {
			want.Headers = append(want.Headers, [2]string{kv[0], valid(kv[1])})
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%d: %q read back as %+v, want %+v", i, body, got, want)
		}
		var w wireResponse
		if err := json.Unmarshal(body, &w); err != nil {
			t.Fatalf("%d: encoding/json cannot read %q: %v", i, body, err)
		}
		if w.Allowed != want.Allowed || w.Limit != want.Limit || (w.RetryAfter == nil) != (want.RetryAfter < 0) ||
			w.Unlimited != want.Unlimited || len(w.Headers) != len(want.Headers) {
			t.Fatalf("%d: encoding/json reads %q as %+v, want %+v", i, body, w, want)
		}
	}
}

func TestParseResponse(t *testing.T) {
	for _, tc := range []struct {
		body, err string
		want      Response
	}{
		{`{"allowed":true,"future":1}`, "", Response{Allowed: true, Status: 429, RetryAfter: -1}},
		{`{"allowed":false,"status":429,"retry_after":null}`, "", Response{Status: 429, RetryAfter: -1}},
		{`{"allowed":false,"status":503,"retry_after":7}`, "", Response{Status: 503, RetryAfter: 7}},
		{`{"status":200}`, "allowed: is required", Response{}},
		{`{"allowed":false,"status":200}`, "a denial needs a status of 400 or more", Response{}},
		{`{"allowed":"yes"}`, "allowed: must be", Response{}},
		{`{"allowed":true,"headers":{"a":1}}`, "headers.a: must be a string", Response{}},
		{`nope`, "line 1", Response{}},
		{``, "empty document", Response{}},
		{`[]`, "must be an object", Response{}},
		{`{"allowed": false, "status": 1e400}`, "status: must be", Response{}},
		{`{"allowed": true, "future": [1, {}]}`, "", Response{Allowed: true, Status: 429, RetryAfter: -1}},
	} {
		got, err := ParseResponse([]byte(tc.body))
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: error %v, want %q", tc.body, err, tc.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %+v, %v; want %+v", tc.body, got, err, tc.want)
		}
	}
}

// BenchmarkCodec: a typical check's request read and answer written by dianad, beside
// encoding/json doing the same with the wire structs.
func BenchmarkCodec(b *testing.B) {
	req := Request{Method: "GET", Host: "api.example.com", Path: "/api/v1/users/42", ClientIP: "192.0.2.17",
		Headers: [][2]string{{"user-agent", "curl/8.5.0"}, {"accept", "*/*"}, {"x-api-key", "k-12345"}}}
	body := req.AppendJSON(nil, 1<<16)
	res := Response{Allowed: true, Rule: "per-ip", Status: 200, Limit: 100, Remaining: 57, Reset: 12, DelayMS: 0,
		Headers: [][2]string{{"Ratelimit-Limit", "100"}, {"Ratelimit-Remaining", "57"}, {"Ratelimit-Reset", "12"}}}
	b.Run("diana", func(b *testing.B) {
		b.ReportAllocs()
		var out []byte
		for b.Loop() {
			if _, err := ParseRequest(body); err != nil {
				b.Fatal(err)
			}
			out = res.AppendJSON(out[:0])
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		zero := int64(0)
		w := wireResponse{Allowed: true, Rule: "per-ip", Status: 200, Limit: 100, Remaining: 57, Reset: 12, RetryAfter: &zero,
			Headers: map[string]string{"Ratelimit-Limit": "100", "Ratelimit-Remaining": "57", "Ratelimit-Reset": "12"}}
		for b.Loop() {
			var r wireRequest
			if err := json.Unmarshal(body, &r); err != nil {
				b.Fatal(err)
			}
			if _, err := json.Marshal(&w); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestRawBytes: a gateway that passes a client's bytes on unescaped gets the same values as the
// filter, which escapes them.
func TestRawBytes(t *testing.T) {
	const v = "\xff\xfea\xc3"
	got, err := ParseRequest([]byte(`{"consumer":"` + v + `","headers":{"x-k` + v + `":"` + v + `"}}`))
	if err != nil {
		t.Fatal(err)
	}
	want, err := ParseRequest((&Request{Consumer: v, Headers: [][2]string{{"x-k" + v, v}}}).AppendJSON(nil, 1<<16))
	if err != nil || got.Consumer != want.Consumer || got.Consumer != valid(v) || !reflect.DeepEqual(got.Headers, want.Headers) {
		t.Fatalf("raw bytes read as %+v, escaped as %+v (%v)", got, want, err)
	}
}

// FuzzParseRequest: any body is read or refused, never a panic; what is read writes back to a
// body that reads the same.
func FuzzParseRequest(f *testing.F) {
	f.Add([]byte(`{"method":"GET","path":"/a","client_ip":"192.0.2.1","headers":{"x-api-key":"k"}}`))
	f.Add([]byte("{\"consumer\":\"\xff\",\"headers\":{}}"))
	f.Add([]byte(`{"path":"\u0000\ud800"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := ParseRequest(body)
		if err != nil {
			return
		}
		again, err := ParseRequest(r.AppendJSON(nil, 1<<20))
		if err != nil || !reflect.DeepEqual(again, r) {
			t.Fatalf("%q read as %+v, written and read again as %+v (%v)", body, r, again, err)
		}
	})
}

// TestUsageAndSettleRoundTrip: a response's usage entries and a settle body read back as
// written, and ParseSettle names the field of a bad entry.
func TestUsageAndSettleRoundTrip(t *testing.T) {
	in := Response{Allowed: true, Status: 200, RetryAfter: 0, Usage: []Usage{
		{Rule: "tokens", Body: "usage.input_tokens+usage.output_tokens", Ticket: "a.b"},
		{Rule: "vllm", Body: "usage.total_tokens", Ticket: "e.f", StreamUsage: "last"},
		{Rule: "h\"x", Header: "x-usage", Ticket: "c.d"},
		{Rule: "llm", Ticket: "g.h", Format: "anthropic"}}}
	out, err := ParseResponse(in.AppendJSON(nil))
	if err != nil || !reflect.DeepEqual(out.Usage, in.Usage) {
		t.Fatalf("usage %+v (%v), want %+v", out.Usage, err, in.Usage)
	}
	req, err := ParseRequest((&Request{Path: "/", Settle: true}).AppendJSON(nil, 1<<10))
	if err != nil || !req.Settle {
		t.Fatalf("settle lost: %+v %v", req, err)
	}
	s := []Settlement{{Ticket: "a.b", Cost: 42}, {Ticket: "c.d", Unread: "usage missing: x"}, {Ticket: "e", Cost: MaxCost},
		{Ticket: "f", Tokens: usage.Tokens{1, 2, 3, 4, 5, 6}, HasTokens: true, Model: "gpt-4o"},
		{Ticket: "g", Unread: "usage body cut short", Tokens: usage.Tokens{7}, HasTokens: true}}
	got, err := ParseSettle(AppendSettle(nil, s))
	if err != nil || !reflect.DeepEqual(got, s) {
		t.Fatalf("settle %+v (%v), want %+v", got, err, s)
	}
	for _, tc := range []struct{ body, want string }{
		{`{}`, "settle: "},
		{`{"settle":{}}`, "settle: must be a list"},
		{`{"settle":[{"ticket":"t","cost":-1}]}`, "settle[0].cost: "},
		{`{"settle":[{"ticket":"t"}]}`, "settle[0].cost: give one of"},
		{`{"settle":[{"ticket":"t","cost":1},{"cost":1}]}`, "settle[1].ticket: "},
		{`{"settle":[{"ticket":"t","cost":1,"x":1}]}`, "settle[0].x: unknown field"},
		{`{"settle":[{"ticket":"t","cost":1,"tokens":{"input":1}}]}`, "settle[0].cost: give one of"},
		{`{"settle":[{"ticket":"t","tokens":{"input":-1}}]}`, "settle[0].tokens.input: "},
		{`{"settle":[{"ticket":"t","tokens":{"inputs":1}}]}`, "settle[0].tokens.inputs: unknown field"},
		{`{"settle":[{"ticket":"t","cost":1,"model":"m"}]}`, "settle[0].model: goes with tokens"},
	} {
		if _, err := ParseSettle([]byte(tc.body)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.body, err, tc.want)
		}
	}
}
