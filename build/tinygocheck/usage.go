package main

import "github.com/diana-gw/diana/shared/usage"

// checkUsage reads the usage of a streamed response fed in small chunks, of a JSON body with a
// negative count, and of a stream with a running total in every event: 12, a value error, 9;
// then an Anthropic stream in its format (auto, by path), priced: 25 input and 15 output tokens.
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
	return checkFormat()
}

// checkFormat reads an Anthropic stream in 7-byte chunks, its running totals, and prices it.
func checkFormat() bool {
	stream := []byte("event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-x\",\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":15}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
	r := usage.NewFormatReader(usage.FormatForPath("/v1/messages"), usage.EventStream, usage.Limits{})
	for i := 0; i < len(stream); i += 7 {
		r.Write(stream[i:min(i+7, len(stream))])
	}
	u, err := r.Usage()
	if err != nil || u.Tokens[usage.Input] != 25 || u.Tokens[usage.Output] != 15 || u.Model != "claude-x" {
		println("usage: anthropic stream: got", u.Tokens[usage.Input], u.Tokens[usage.Output], u.Model, err)
		return false
	}
	in, _ := usage.ParseRate("2.5")
	out, _ := usage.ParseRate("10")
	rates := usage.Rates{usage.Input: in, usage.Output: out}
	if cost, ok := rates.Cost(u.Tokens); cost != 213 || !ok { // 62.5 + 150, rounded up
		println("usage: priced", cost)
		return false
	}
	return true
}
