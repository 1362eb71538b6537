package usage_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/diana-gw/diana/internal/costtest"
	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/usage"
)

// vector is one golden vector: a body, the fields read from it, and the cost or the class of
// error it gives. Every vector is read whole, byte by byte and split at every position, and
// must give the same answer each way.
type vector struct {
	name   string
	fields string
	stream bool
	body   string
	cost   int64
	err    error // nil: cost
}

const (
	total = "usage.total_tokens"
	inOut = "usage.input_tokens+usage.output_tokens"
)

var jsonVectors = []vector{
	{"openai", total, false, `{"id":"c1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hi"}}],"usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21}}`, 21, nil},
	{"openai sum", "usage.prompt_tokens+usage.completion_tokens", false, `{"usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21}}`, 21, nil},
	{"anthropic", inOut, false, `{"type":"message","content":[{"type":"text","text":"Hi"}],"usage":{"input_tokens":10,"output_tokens":5}}`, 15, nil},
	{"whitespace", total, false, " \r\n\t{ \"usage\" :\n{ \"total_tokens\" : 7 } }\n", 7, nil},
	{"zero", total, false, `{"usage":{"total_tokens":0}}`, 0, nil},
	{"10^15", total, false, `{"usage":{"total_tokens":1000000000000000}}`, algos.MaxCount, nil},
	{"decoy in array", total, false, `{"choices":[{"usage":{"total_tokens":999}}],"usage":{"total_tokens":7}}`, 7, nil},
	{"decoy in string", total, false, `{"text":"\"usage\":{\"total_tokens\":5}","usage":{"total_tokens":3}}`, 3, nil},
	{"decoy deeper", total, false, `{"x":{"usage":{"total_tokens":5}},"usage":{"total_tokens":3}}`, 3, nil},
	{"escaped key", total, false, `{"usage":{"total\u005ftokens":4}}`, 4, nil},
	{"key prefixes", total, false, `{"usage":{"total_tokens_x":4,"total_token":5,"total_tokens":6,"":1}}`, 6, nil},
	{"surrogate pair key", "u😀.n", false, `{"u\ud83d\ude00":{"n":3}}`, 3, nil},
	{"escapes in a key", `a"\/b.n`, false, `{"a\"\\\/b":{"n":4}}`, 4, nil},
	{"raw UTF-8 key", "u😀.n", false, `{"u😀":{"n":3},"é":"\u00e9"}`, 3, nil},
	{"lone surrogate elsewhere", total, false, `{"a":"\ud83d","b":"\ude00x","usage":{"total_tokens":2}}`, 2, nil},
	{"every kind of value", total, false, `{"a":[1,-2.5e+3,0.0,true,false,null,"s",{},[]],"usage":{"total_tokens":8}}`, 8, nil},

	{"empty body", total, false, ``, 0, usage.ErrMissing},
	{"blank body", total, false, "  \n", 0, usage.ErrMissing},
	{"no usage", total, false, `{"choices":[]}`, 0, usage.ErrMissing},
	{"usage null", total, false, `{"usage":null}`, 0, usage.ErrMissing},
	{"one term missing", inOut, false, `{"usage":{"input_tokens":10}}`, 0, usage.ErrMissing},
	{"top-level number", total, false, `5`, 0, usage.ErrMissing},
	{"top-level array", total, false, `[{"usage":{"total_tokens":1}}]`, 0, usage.ErrMissing},

	{"negative", total, false, `{"usage":{"total_tokens":-5}}`, 0, usage.ErrValue},
	{"negative zero", total, false, `{"usage":{"total_tokens":-0}}`, 0, usage.ErrValue},
	{"fraction", total, false, `{"usage":{"total_tokens":1.5}}`, 0, usage.ErrValue},
	{"whole fraction", total, false, `{"usage":{"total_tokens":1.0}}`, 0, usage.ErrValue},
	{"exponent", total, false, `{"usage":{"total_tokens":1e3}}`, 0, usage.ErrValue},
	{"above 10^15", total, false, `{"usage":{"total_tokens":1000000000000001}}`, 0, usage.ErrValue},
	{"huge", total, false, `{"usage":{"total_tokens":` + strings.Repeat("9", 400) + `}}`, 0, usage.ErrValue},
	{"sum above 10^15", inOut, false, `{"usage":{"input_tokens":600000000000000,"output_tokens":600000000000000}}`, 0, usage.ErrValue},
	{"string", total, false, `{"usage":{"total_tokens":"12"}}`, 0, usage.ErrValue},
	{"null", total, false, `{"usage":{"total_tokens":null}}`, 0, usage.ErrValue},
	{"true", total, false, `{"usage":{"total_tokens":true}}`, 0, usage.ErrValue},
	{"object", total, false, `{"usage":{"total_tokens":{"n":1}}}`, 0, usage.ErrValue},
	{"array", total, false, `{"usage":{"total_tokens":[1]}}`, 0, usage.ErrValue},

	{"duplicate key", total, false, `{"usage":{"total_tokens":1,"total_tokens":2}}`, 0, usage.ErrDuplicate},
	{"duplicate parent", total, false, `{"usage":{"total_tokens":1},"usage":{"total_tokens":2}}`, 0, usage.ErrDuplicate},
	{"duplicate parent without field", total, false, `{"usage":{"total_tokens":1},"usage":{}}`, 0, usage.ErrDuplicate},
	{"duplicate by escape", total, false, `{"usage":{"total_tokens":1,"total\u005ftokens":2}}`, 0, usage.ErrDuplicate},

	{"invalid UTF-8", total, false, "{\"a\":\"\xff\",\"usage\":{\"total_tokens\":1}}", 0, usage.ErrSyntax},
	{"overlong UTF-8", total, false, "{\"a\":\"\xc0\x80\",\"usage\":{\"total_tokens\":1}}", 0, usage.ErrSyntax},
	{"UTF-8 surrogate", total, false, "{\"a\":\"\xed\xa0\x80\",\"usage\":{\"total_tokens\":1}}", 0, usage.ErrSyntax},
	{"UTF-8 cut", total, false, "{\"a\":\"\xe2\x82\",\"usage\":{\"total_tokens\":1}}", 0, usage.ErrSyntax},
	{"UTF-8 outside a string", total, false, "{\"usage\":{\"total_tokens\":1}}\xc3\xa9", 0, usage.ErrSyntax},
	{"control character", total, false, "{\"a\":\"\n\",\"usage\":{\"total_tokens\":1}}", 0, usage.ErrSyntax},
	{"bad escape", total, false, `{"a":"\x","usage":{"total_tokens":1}}`, 0, usage.ErrSyntax},
	{"bad unicode escape", total, false, `{"a":"\u12g4","usage":{"total_tokens":1}}`, 0, usage.ErrSyntax},
	{"trailing comma", total, false, `{"usage":{"total_tokens":1},}`, 0, usage.ErrSyntax},
	{"leading zero", total, false, `{"usage":{"total_tokens":01}}`, 0, usage.ErrSyntax},
	{"bare minus", total, false, `{"usage":{"total_tokens":-}}`, 0, usage.ErrSyntax},
	{"plus sign", total, false, `{"usage":{"total_tokens":+1}}`, 0, usage.ErrSyntax},
	{"NaN", total, false, `{"usage":{"total_tokens":NaN}}`, 0, usage.ErrSyntax},
	{"bad literal", total, false, `{"a":nul,"usage":{"total_tokens":1}}`, 0, usage.ErrSyntax},
	{"single quotes", total, false, `{'usage':{'total_tokens':1}}`, 0, usage.ErrSyntax},
	{"comment", total, false, `{"usage":{"total_tokens":1}}//`, 0, usage.ErrSyntax},
	{"two documents", total, false, `{"usage":{"total_tokens":1}} {}`, 0, usage.ErrSyntax},
	{"mismatched close", total, false, `{"usage":{"total_tokens":1]}`, 0, usage.ErrSyntax},
	{"missing colon", total, false, `{"usage" {"total_tokens":1}}`, 0, usage.ErrSyntax},
	{"deep", total, false, strings.Repeat(`{"a":`, 65) + "1" + strings.Repeat("}", 65), 0, usage.ErrDepth},
	{"deep arrays", total, false, strings.Repeat("[", 100000), 0, usage.ErrDepth},
	{"64 deep", total, false, strings.Repeat(`{"a":`, 64) + "1" + strings.Repeat("}", 64), 0, usage.ErrMissing},

	{"cut in the value", total, false, `{"usage":{"total_tokens":5`, 0, usage.ErrTruncated},
	{"cut after the value", total, false, `{"usage":{"total_tokens":5}`, 0, usage.ErrTruncated},
	{"cut in a string", total, false, `{"usage":{"total_tokens":5},"x":"ab`, 0, usage.ErrTruncated},
	{"cut in a literal", total, false, `{"usage":{"total_tokens":5},"x":tr`, 0, usage.ErrTruncated},
}

// openAIStream is an OpenAI chat completion streamed with stream_options.include_usage: every
// chunk has "usage":null but the last before [DONE].
const openAIStream = "data: {\"id\":\"c1\",\"choices\":[{\"delta\":{\"content\":\"Hel\"}}],\"usage\":null}\n\n" +
	"data: {\"id\":\"c1\",\"choices\":[{\"delta\":{\"content\":\"lo\"}}],\"usage\":null}\n\n" +
	"data: {\"id\":\"c1\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":7,\"total_tokens\":12}}\n\n" +
	"data: [DONE]\n\n"

// anthropicStream is an Anthropic message stream: message_start's usage is under "message".
const anthropicStream = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n" +
	"event: ping\ndata: {\"type\": \"ping\"}\n\n" +
	"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n" +
	"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":15}}\n\n" +
	"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"

const usageEvent = "data: {\"usage\":{\"total_tokens\":12}}\n\n"

var streamVectors = []vector{
	{"openai", total, true, openAIStream, 12, nil},
	{"openai CRLF", total, true, strings.ReplaceAll(openAIStream, "\n", "\r\n"), 12, nil},
	{"openai CR", total, true, strings.ReplaceAll(openAIStream, "\n", "\r"), 12, nil},
	{"anthropic", "usage.output_tokens", true, anthropicStream, 15, nil},
	{"anthropic start", "message.usage.input_tokens", true, anthropicStream, 25, nil},
	{"comments and fields", total, true, ": keep-alive\nid: 7\nretry: 100\nevent: x\ndatum: {\"usage\":{\"total_tokens\":99}}\ndata:{\"usage\":{\"total_tokens\":4}}\n\n", 4, nil},
	{"data on two lines", inOut, true, "data: {\"usage\":{\"input_tokens\":1,\ndata: \"output_tokens\":2}}\n\n", 3, nil},
	{"empty data lines", total, true, "data\n\ndata:\n\ndata: \n\n" + usageEvent, 12, nil},
	{"blank lines only", total, true, "\n\n\n" + usageEvent + "\n\n", 12, nil},
	{"usage then DONE without blank line", total, true, usageEvent + "data: [DONE]", 12, nil},
	{"usage then a cut event", total, true, usageEvent + "data: {\"choi", 12, nil},
	{"DONE before usage", total, true, "data: [DONE]\n\n" + usageEvent, 12, nil},

	{"empty stream", total, true, "", 0, usage.ErrMissing},
	{"no usage", total, true, "data: {\"usage\":null}\n\ndata: [DONE]\n\n", 0, usage.ErrMissing},
	{"cut before usage", total, true, strings.Split(openAIStream, "data: {\"id\":\"c1\",\"choices\":[]")[0], 0, usage.ErrMissing},
	{"cut inside the usage event", total, true, strings.TrimSuffix(usageEvent, "\n\n"), 0, usage.ErrMissing},
	{"usage event not ended", total, true, strings.TrimSuffix(usageEvent, "\n"), 0, usage.ErrMissing},
	{"event without a term", inOut, true, "data: {\"usage\":{\"output_tokens\":2}}\n\n", 0, usage.ErrMissing},
	{"terms in two events", inOut, true, "data: {\"usage\":{\"input_tokens\":1}}\n\ndata: {\"usage\":{\"output_tokens\":2}}\n\n", 0, usage.ErrMissing},

	{"duplicate usage events", total, true, usageEvent + usageEvent, 0, usage.ErrDuplicate},
	{"duplicate key in an event", total, true, "data: {\"usage\":{\"total_tokens\":1,\"total_tokens\":1}}\n\n", 0, usage.ErrDuplicate},
	{"negative", total, true, "data: {\"usage\":{\"total_tokens\":-12}}\n\n", 0, usage.ErrValue},
	{"fraction", total, true, "data: {\"usage\":{\"total_tokens\":12.5}}\n\n", 0, usage.ErrValue},
	{"huge", total, true, "data: {\"usage\":{\"total_tokens\":1e300}}\n\n", 0, usage.ErrValue},
	{"string", total, true, "data: {\"usage\":{\"total_tokens\":\"12\"}}\n\n", 0, usage.ErrValue},
	{"event not JSON", total, true, "data: hello\n\n" + usageEvent, 0, usage.ErrSyntax},
	{"DONE prefix", total, true, "data: [DON\n\n" + usageEvent, 0, usage.ErrSyntax},
	{"DONE and more", total, true, "data: [DONE]x\n\n" + usageEvent, 0, usage.ErrSyntax},
	{"invalid UTF-8", total, true, "data: {\"t\":\"\xfe\"}\n\n" + usageEvent, 0, usage.ErrSyntax},
	{"deep", total, true, "data: " + strings.Repeat("[", 65) + "\n\n", 0, usage.ErrDepth},
	{"event cut then ended", total, true, "data: {\"usage\":{\"total_tokens\":12\n\n", 0, usage.ErrTruncated},
}

// vllmStream is a vLLM chat completion streamed with stream_options include_usage and
// continuous_usage_stats: every chunk carries the running total, and the last chunk the final
// one.
const vllmStream = "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}],\"usage\":{\"prompt_tokens\":5,\"total_tokens\":5,\"completion_tokens\":0}}\n\n" +
	"data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}],\"usage\":{\"prompt_tokens\":5,\"total_tokens\":6,\"completion_tokens\":1}}\n\n" +
	"data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"},\"finish_reason\":\"stop\"}],\"usage\":{\"prompt_tokens\":5,\"total_tokens\":7,\"completion_tokens\":2}}\n\n" +
	"data: {\"id\":\"c1\",\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"total_tokens\":7,\"completion_tokens\":2}}\n\n" +
	"data: [DONE]\n\n"

// lastVectors are streams read with LastEvent: the last event carrying usage counts. Every
// other stream vector but the duplicate events gives the same answer with it (TestVectors).
var lastVectors = []vector{
	{"vllm", total, true, vllmStream, 7, nil},
	{"vllm sum", "usage.prompt_tokens+usage.completion_tokens", true, vllmStream, 7, nil},
	{"vllm cut before its last chunk", total, true, strings.Split(vllmStream, "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo")[0], 6, nil},
	{"vllm cut inside a chunk", total, true, vllmStream[:strings.Index(vllmStream, `"lo"`)], 6, nil},
	{"the last counts, not the largest", total, true, "data: {\"usage\":{\"total_tokens\":20}}\n\n" + usageEvent, 12, nil},
	{"duplicate usage events", total, true, usageEvent + usageEvent, 12, nil},
	{"usage null between", total, true, usageEvent + "data: {\"usage\":null}\n\ndata: [DONE]\n\n", 12, nil},

	{"a bad value after a good one", total, true, usageEvent + "data: {\"usage\":{\"total_tokens\":-1}}\n\n", 0, usage.ErrValue},
	{"a later event without a term", inOut, true, "data: {\"usage\":{\"input_tokens\":1,\"output_tokens\":2}}\n\ndata: {\"usage\":{\"output_tokens\":3}}\n\n", 0, usage.ErrMissing},
	{"duplicate key in a later event", total, true, usageEvent + "data: {\"usage\":{\"total_tokens\":1,\"total_tokens\":1}}\n\n", 0, usage.ErrDuplicate},
	{"a later event not JSON", total, true, usageEvent + "data: hello\n\n", 0, usage.ErrSyntax},
}

// read feeds body to a new reader of events e in chunks of at most size bytes (0: whole).
func read(t testing.TB, v vector, e usage.Events, size int) (int64, error) {
	t.Helper()
	f, err := usage.ParsePaths(v.fields)
	if err != nil {
		t.Fatalf("%s: %v", v.name, err)
	}
	r := usage.NewReader(f, v.stream, usage.Limits{})
	r.SetEvents(e)
	write(r, []byte(v.body), size)
	return r.End()
}

func write(r *usage.Reader, b []byte, size int) {
	for len(b) > 0 {
		n := len(b)
		if size > 0 {
			n = min(n, size)
		}
		if m, err := r.Write(b[:n]); m != n || err != nil {
			panic("Write did not take the whole chunk")
		}
		b = b[n:]
	}
}

func TestVectors(t *testing.T) {
	type group struct {
		mode    string
		events  usage.Events
		vectors []vector
	}
	groups := []group{{"json", usage.OneEvent, jsonVectors}, {"stream", usage.OneEvent, streamVectors}, {"last", usage.LastEvent, lastVectors}}
	last := map[string]bool{}
	for _, v := range lastVectors {
		last[v.name] = true
	}
	for _, v := range streamVectors {
		if !last[v.name] {
			groups[2].vectors = append(groups[2].vectors, v)
		}
	}
	for _, g := range groups {
		for _, v := range g.vectors {
			testVector(t, g.mode, g.events, v)
		}
	}
}

// testVector reads v with events whole, byte by byte and split at every position.
func testVector(t *testing.T, mode string, events usage.Events, v vector) {
	t.Run(mode+"/"+v.name, func(t *testing.T) {
		cost, err := read(t, v, events, 0)
		switch {
		case v.err == nil && err != nil:
			t.Fatalf("got error %v, want cost %d", err, v.cost)
		case v.err != nil && !errors.Is(err, v.err):
			t.Fatalf("got (%d, %v), want an error of class %v", cost, err, v.err)
		case v.err == nil && cost != v.cost:
			t.Fatalf("got cost %d, want %d", cost, v.cost)
		}
		if err != nil {
			t.Logf("%v", err)
		}
		// The same answer chunk by chunk: byte by byte, and split in two at every position.
		same := func(how string, c int64, e error) {
			if c != cost || usage.Class(e) != usage.Class(err) {
				t.Fatalf("%s: got (%d, %v), whole (%d, %v)", how, c, e, cost, err)
			}
		}
		c, e := read(t, v, events, 1)
		same("byte by byte", c, e)
		if len(v.body) > 2000 {
			return
		}
		f, _ := usage.ParsePaths(v.fields)
		for i := 0; i <= len(v.body); i++ {
			r := usage.NewReader(f, v.stream, usage.Limits{})
			r.SetEvents(events)
			r.Write([]byte(v.body[:i]))
			r.Write([]byte(v.body[i:]))
			c, e := r.End()
			same("split", c, e)
		}
	})
}

func TestMaxValueIsMaxCount(t *testing.T) {
	if usage.MaxValue != algos.MaxCount {
		t.Fatalf("usage.MaxValue %d, algos.MaxCount %d", usage.MaxValue, algos.MaxCount)
	}
}

func TestLimits(t *testing.T) {
	f, _ := usage.ParsePaths(total)
	body := `{"usage":{"total_tokens":5}}`
	for _, c := range []struct {
		name string
		lim  usage.Limits
		err  error
	}{
		{"exactly MaxBytes", usage.Limits{MaxBytes: int64(len(body))}, nil},
		{"one byte over", usage.Limits{MaxBytes: int64(len(body)) - 1}, usage.ErrTooLarge},
		{"depth 2", usage.Limits{MaxDepth: 2}, nil},
		{"depth 1", usage.Limits{MaxDepth: 1}, usage.ErrDepth},
	} {
		for _, size := range []int{0, 1, 7} {
			r := usage.NewReader(f, false, c.lim)
			write(r, []byte(body), size)
			n, err := r.End()
			if !errors.Is(err, c.err) || c.err == nil && (err != nil || n != 5) {
				t.Errorf("%s, chunks of %d: got (%d, %v), want error %v", c.name, size, n, err, c.err)
			}
		}
	}
	// A stream past MaxBytes after its usage event is still too large.
	r := usage.NewReader(f, true, usage.Limits{MaxBytes: int64(len(usageEvent)) + 3})
	write(r, []byte(usageEvent+usageEvent), 0)
	if _, err := r.End(); !errors.Is(err, usage.ErrTooLarge) {
		t.Errorf("stream over MaxBytes: %v", err)
	}
}

// TestRead reads an estimate from a request's peek: only a body read whole, with the field once
// as a whole number, gives one; anything a client could steer is an error other than ErrMissing.
func TestRead(t *testing.T) {
	f, _ := usage.ParsePaths("max_tokens")
	for _, c := range []struct {
		body  string
		whole bool
		n     int64
		err   error
	}{
		{`{"model":"m","max_tokens":300}`, true, 300, nil},
		{`{"model":"m","max_tokens":300,"messages":[{"role":"user","content":"hel`, false, 0, usage.ErrTruncated},
		{`{"model":"m","max_tokens":30`, false, 0, usage.ErrTruncated},
		{`{"model":"m","messages":[{"role":"user","content":"hel`, false, 0, usage.ErrTruncated},
		{`{"model":"m","messages":[]}`, true, 0, usage.ErrMissing},
		{`{"max_tokens":1,"max_tokens":900}`, true, 0, usage.ErrDuplicate},
		{`{"max_tokens":1,"x":{"max_tokens":900}}`, true, 1, nil},
		{`{"model":"m","max_tokens":-1}`, true, 0, usage.ErrValue},
		{`{"model":"m","max_tokens":1e3}`, true, 0, usage.ErrValue},
		{`{"model":"m","max_tokens":"900"}`, true, 0, usage.ErrValue},
		{`{"model":"m","max_tokens":300`, true, 0, usage.ErrTruncated},
		{`{"model":"m","max_tokens":300}}`, true, 0, usage.ErrSyntax},
		{"\x1f\x8b\x08\x00", true, 0, usage.ErrSyntax},
		{``, true, 0, usage.ErrMissing},
	} {
		n, err := f.Read(c.body, c.whole)
		if n != c.n || !errors.Is(err, c.err) || (c.err == nil) != (err == nil) {
			t.Errorf("%q (whole %v): got (%d, %v), want (%d, %v)", c.body, c.whole, n, err, c.n, c.err)
		}
	}
}

func TestHeader(t *testing.T) {
	for _, c := range []struct {
		fields string
		h      http.Header
		n      int64
		err    error
	}{
		{"x-usage-tokens", http.Header{"X-Usage-Tokens": {"42"}}, 42, nil},
		{"X-Usage-Tokens", http.Header{"X-Usage-Tokens": {" 42 "}}, 42, nil},
		{"x-in + x-out", http.Header{"X-In": {"2"}, "X-Out": {"3"}}, 5, nil},
		{"x-in+x-out", http.Header{"X-In": {"2"}}, 0, usage.ErrMissing},
		{"x-usage-tokens", http.Header{}, 0, usage.ErrMissing},
		{"x-usage-tokens", http.Header{"X-Usage-Tokens": {"1", "2"}}, 0, usage.ErrDuplicate},
		{"x-usage-tokens", http.Header{"X-Usage-Tokens": {"-1"}}, 0, usage.ErrValue},
		{"x-usage-tokens", http.Header{"X-Usage-Tokens": {"1.5"}}, 0, usage.ErrValue},
		{"x-usage-tokens", http.Header{"X-Usage-Tokens": {"1000000000000001"}}, 0, usage.ErrValue},
		{"x-usage-tokens", http.Header{"X-Usage-Tokens": {"12abc"}}, 0, usage.ErrValue},
		{"x-usage-tokens", http.Header{"X-Usage-Tokens": {""}}, 0, usage.ErrValue},
		{"x-a+x-b", http.Header{"X-A": {"600000000000000"}, "X-B": {"600000000000000"}}, 0, usage.ErrValue},
	} {
		f, err := usage.ParseHeaders(c.fields)
		if err != nil {
			t.Fatal(err)
		}
		n, err := f.Header(c.h.Values)
		if n != c.n || !errors.Is(err, c.err) || (c.err == nil) != (err == nil) {
			t.Errorf("%s %v: got (%d, %v), want (%d, %v)", c.fields, c.h, n, err, c.n, c.err)
		}
	}
}

func TestParseFields(t *testing.T) {
	for _, c := range []struct {
		expr    string
		headers bool
		err     string
	}{
		{"usage.total_tokens", false, ""},
		{" usage.a + usage.b ", false, ""},
		{"", false, "empty term"},
		{"usage.a+", false, "empty term"},
		{"usage..a", false, "empty key"},
		{".a", false, "empty key"},
		{"a+a", false, "named twice"},
		{"a+b+c+d+e+f+g+h+i", false, "more than 8 terms"},
		{strings.Repeat("a.", 16) + "a", false, "more than 16 keys"},
		{"x-usage", true, ""},
		{"x usage", true, "cannot have"},
		{"x-a+X-A", true, "named twice"},
	} {
		parse := usage.ParsePaths
		if c.headers {
			parse = usage.ParseHeaders
		}
		_, err := parse(c.expr)
		if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%q: got %v, want %q", c.expr, err, c.err)
		}
	}
}

func TestIsStream(t *testing.T) {
	for ct, want := range map[string]bool{
		"text/event-stream": true, "Text/Event-Stream; charset=utf-8": true, " text/event-stream ": true,
		"application/json": false, "": false, "text/event-streams": false,
	} {
		if usage.IsStream(ct) != want {
			t.Errorf("IsStream(%q) = %v", ct, !want)
		}
	}
}

func TestClass(t *testing.T) {
	f, _ := usage.ParsePaths(total)
	r := usage.NewReader(f, false, usage.Limits{})
	r.Write([]byte(`{"usage":{"total_tokens":-1}}`))
	_, err := r.End()
	if usage.Class(err) != "value" || !strings.Contains(err.Error(), "usage.total_tokens: negative") {
		t.Errorf("class %q of %v", usage.Class(err), err)
	}
	if got := usage.Class(errors.New("x")); got != "other" {
		t.Errorf("Class of another error: %q", got)
	}
}

// TestEndlessStream feeds a reader 64 MiB of events with no usage, in 32 KiB chunks: no
// allocation per chunk, a bounded total, and the answer at the end is ErrMissing.
func TestEndlessStream(t *testing.T) {
	f, _ := usage.ParsePaths(total)
	chunk := bytes.Repeat([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"token token token\"}}],\"usage\":null}\n\n"), 400)
	r := usage.NewReader(f, true, usage.Limits{})
	if a := testing.AllocsPerRun(10, func() { r.Write(chunk) }); a != 0 {
		t.Errorf("%v allocations per chunk", a)
	}
	var err error
	costtest.Check(t, "64 MiB stream", 64<<10, time.Minute, func() {
		r := usage.NewReader(f, true, usage.Limits{})
		for n := 0; n < 64<<20; n += len(chunk) {
			r.Write(chunk)
		}
		_, err = r.End()
	})
	if !errors.Is(err, usage.ErrMissing) {
		t.Errorf("got %v", err)
	}
	// One JSON string of 64 MiB.
	costtest.Check(t, "64 MiB string", 64<<10, time.Minute, func() {
		r := usage.NewReader(f, false, usage.Limits{})
		r.Write([]byte(`{"content":"`))
		for n := 0; n < 64<<20; n += len(filler) {
			r.Write(filler[:])
		}
		r.Write([]byte(`","usage":{"total_tokens":3}}`))
		_, err = r.End()
	})
	if err != nil {
		t.Errorf("got %v", err)
	}
}

var filler = [32 << 10]byte{}

func init() {
	for i := range filler {
		filler[i] = 'a'
	}
}

// FuzzReader reads any body as JSON and as a stream, as a request's peek (Read) and a string field of
// it (Text): no panic, the same answer whole and in
// two chunks, a cost only in [0, MaxValue], and a JSON cost only for a body encoding/json
// reads as valid JSON with that number at the path.
func FuzzReader(f *testing.F) {
	for _, v := range append(append(jsonVectors, streamVectors...), lastVectors...) {
		if len(v.body) < 4096 {
			f.Add([]byte(v.body), uint16(len(v.body)/2))
		}
	}
	fields, _ := usage.ParsePaths(inOut)
	model, _ := usage.ParsePaths("model")
	f.Fuzz(func(t *testing.T, body []byte, split uint16) {
		if v, ok := model.Text(string(body)); !ok && v != "" || len(v) > 256 {
			t.Fatalf("Text: (%q, %v)", v, ok)
		}
		for _, whole := range []bool{false, true} {
			if n, err := fields.Read(string(body), whole); n < 0 || n > usage.MaxValue || err != nil && (n != 0 || usage.Class(err) == "other") {
				t.Fatalf("Read (whole %v): (%d, %v)", whole, n, err)
			}
		}
		at := min(int(split), len(body))
		for _, m := range []struct {
			stream bool
			events usage.Events
		}{{false, usage.OneEvent}, {true, usage.OneEvent}, {true, usage.LastEvent}} {
			stream := m.stream
			r := usage.NewReader(fields, stream, usage.Limits{})
			r.SetEvents(m.events)
			r.Write(body)
			n, err := r.End()
			r2 := usage.NewReader(fields, stream, usage.Limits{})
			r2.SetEvents(m.events)
			r2.Write(body[:at])
			r2.Write(body[at:])
			n2, err2 := r2.End()
			if n != n2 || usage.Class(err) != usage.Class(err2) {
				t.Fatalf("stream %v: whole (%d, %v), split at %d (%d, %v)", stream, n, err, at, n2, err2)
			}
			if err != nil {
				if n != 0 || usage.Class(err) == "other" {
					t.Fatalf("stream %v: (%d, %v)", stream, n, err)
				}
				continue
			}
			if n < 0 || n > usage.MaxValue {
				t.Fatalf("stream %v: cost %d", stream, n)
			}
			if stream {
				continue
			}
			var doc any
			d := json.NewDecoder(bytes.NewReader(body))
			d.UseNumber()
			if e := d.Decode(&doc); e != nil || !json.Valid(body) {
				t.Fatalf("cost %d from a body encoding/json refuses: %v", n, e)
			}
			var sum int64
			for _, k := range []string{"input_tokens", "output_tokens"} {
				top, _ := doc.(map[string]any)
				u, _ := top["usage"].(map[string]any)
				v, ok := u[k].(json.Number)
				i, err := v.Int64()
				if !ok || err != nil {
					t.Fatalf("cost %d, encoding/json reads usage.%s as %v", n, k, u[k])
				}
				sum += i
			}
			if sum != n {
				t.Fatalf("cost %d, encoding/json reads %d", n, sum)
			}
		}
	})
}

func TestText(t *testing.T) {
	f, _ := usage.ParsePaths("model")
	nested, _ := usage.ParsePaths("meta.model")
	for _, c := range []struct {
		f   *usage.Fields
		doc string
		v   string
		ok  bool
	}{
		{f, `{"model":"gpt-4o","max_tokens":5}`, "gpt-4o", true},
		{f, `{"max_tokens":5,"model":"m\u00e9\"x","messages":[{"content":"hel`, `mé"x`, true},
		{f, `{"messages":[{"model":"inner"}],"model":"outer"}`, "outer", true},
		{f, `{"model":"a","model":"b"}`, "%duplicate", true},
		{f, `{"mod\u0065l":"a","model":"b"}`, "%duplicate", true},
		{f, `{"model":"` + strings.Repeat("x", 300) + `"}`, "%long", true},
		{f, `{"model":5}`, "", false},
		{f, `{"model":null}`, "", false},
		{f, `{"messages":[{"content":"hel`, "", false},
		{f, `{"model":"gpt`, "", false},
		{f, ``, "", false},
		{f, `not json`, "", false},
		{nested, `{"meta":{"model":"m1"},"model":"m2"}`, "m1", true},
	} {
		v, ok := c.f.Text(c.doc)
		if v != c.v || ok != c.ok {
			t.Errorf("%s in %.40q: got (%q, %v), want (%q, %v)", c.f, c.doc, v, ok, c.v, c.ok)
		}
	}
}
