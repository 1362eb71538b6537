package main

import "github.com/diana-gw/diana/shared/usage"

// checkUsage reads the usage of a streamed response fed in small chunks, of a JSON body with a
// negative count, and of a stream with a running total in every event: 12, a value error, 9.
func checkUsage() bool {
	f, err := usage.ParsePaths("usage.prompt_tokens+usage.completion_tokens")
	if err != nil {
		println("usage:", err.Error())
		return false
	}
	stream := []byte("data: {\"choices\":[{\"delta\":{\"content\":\"h\\u00e9\"}}],\"usage\":null}\r\n\r\n" +
		"data: {\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":7}}\n\ndata: [DONE]\n\n")
	r := usage.NewReader(f, true, usage.Limits{})
	for i := 0; i < len(stream); i += 5 {
		r.Write(stream[i:min(i+5, len(stream))])
	}
	if n, err := r.End(); n != 12 || err != nil {
		println("usage: stream: got", n, err)
		return false
	}
	r.Reset(f, false, usage.Limits{})
	r.Write([]byte(`{"usage":{"prompt_tokens":-5,"completion_tokens":7}}`))
	if _, err := r.End(); usage.Class(err) != "value" {
		println("usage: a negative count gave", err)
		return false
	}
	r.Reset(f, true, usage.Limits{})
	r.SetEvents(usage.LastEvent)
	r.Write([]byte("data: {\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":1}}\n\n" +
		"data: {\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":4}}\n\n"))
	if n, err := r.End(); n != 9 || err != nil {
		println("usage: the last event: got", n, err)
		return false
	}
	return true
}
