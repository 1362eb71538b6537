package usage_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/diana-gw/diana/shared/usage"
)

// TestUsageChunks drops the usage-only chunk of an OpenAI stream and the "usage": null of the
// others, however the stream is cut into writes, and passes everything else on as it was, in
// order.
func TestUsageChunks(t *testing.T) {
	big := "data: " + `{"choices":[],"usage":{"x":"` + strings.Repeat("y", 70<<10) + `"}}` + "\n\n"
	bare := strings.Replace(openAIChunk, `,"usage":null`, "", 1)
	for _, c := range []struct {
		name, in, out, dropped string
	}{
		{"openai", openAIChunk + openAIChunk + openAIUsage + openAIDone, bare + bare + openAIDone, openAIUsage},
		{"crlf", strings.ReplaceAll(openAIChunk+openAIUsage+openAIDone, "\n", "\r\n"), strings.ReplaceAll(bare+openAIDone, "\n", "\r\n"), strings.ReplaceAll(openAIUsage, "\n", "\r\n")},
		{"no usage chunk", openAIChunk + openAIDone, bare + openAIDone, ""},
		{"usage with choices", strings.Replace(openAIUsage, `"choices":[]`, `"choices":[{"index":0}]`, 1), strings.Replace(openAIUsage, `"choices":[]`, `"choices":[{"index":0}]`, 1), ""},
		{"usage null", `data: {"choices":[],"usage":null}` + "\n\n", `data: {"choices":[]}` + "\n\n", ""},
		{"usage null first", `data: { "usage" : null , "choices":[1]}` + "\n\n", `data: {  "choices":[1]}` + "\n\n", ""},
		{"usage null alone", `data: {"usage":null}` + "\n\n", `data: {}` + "\n\n", ""},
		{"usage null nested", `data: {"a":{"usage":null}}` + "\n\n", `data: {"a":{"usage":null}}` + "\n\n", ""},
		{"usage null on two lines", "data: {\"choices\":[1],\ndata: \"usage\":null}\n\n", "data: {\"choices\":[1],\ndata: \"usage\":null}\n\n", ""},
		{"split data lines", "data: {\"choices\":[],\ndata: \"usage\":{\"total_tokens\":3}}\n\n", "", "data: {\"choices\":[],\ndata: \"usage\":{\"total_tokens\":3}}\n\n"},
		{"comments and fields kept", ": keep-alive\n\nid: 5\n" + openAIChunk, ": keep-alive\n\nid: 5\n" + bare, ""},
		{"too long to hold", big + openAIDone, big + openAIDone, ""},
		{"cut mid-event", openAIChunk + openAIUsage[:30], bare + openAIUsage[:30], ""},
		{"not json", "data: {oops\n\n", "data: {oops\n\n", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, size := range []int{len(c.in), 1, 7, 100} {
				var out, dropped bytes.Buffer
				emit := func(b []byte, drop bool) {
					if drop {
						dropped.Write(b)
					} else {
						out.Write(b)
					}
				}
				var u usage.UsageChunks
				for i := 0; i < len(c.in); i += size {
					u.Write([]byte(c.in[i:min(i+size, len(c.in))]), emit)
				}
				u.Close(emit)
				if out.String() != c.out || dropped.String() != c.dropped {
					t.Fatalf("writes of %d:\n out %.200q\nwant %.200q\n dropped %.200q\nwant %.200q", size, out.String(), c.out, dropped.String(), c.dropped)
				}
			}
		})
	}
}
