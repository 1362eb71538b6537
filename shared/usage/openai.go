package usage

import "github.com/diana-gw/diana/shared/jsontok"

// openAI is OpenAI's Chat Completions, Completions and Embeddings (and every server that speaks
// them: vLLM, Ollama's /v1, Azure OpenAI, ...): usage.prompt_tokens (with
// prompt_tokens_details.cached_tokens among them), usage.completion_tokens (with
// completion_tokens_details.reasoning_tokens among them) and usage.total_tokens, in the JSON body
// or a stream's usage chunk (sent only when the request asks for stream_options.include_usage;
// vLLM's continuous_usage_stats sends a running total in every chunk). A stream ends at [DONE].
var openAI = &Format{
	Name: "openai",
	fields: []field{
		{"usage.prompt_tokens", roleCount, oaPrompt},
		{"usage.completion_tokens", roleCount, oaCompletion},
		{"usage.total_tokens", roleCount, oaTotal},
		{"usage.prompt_tokens_details.cached_tokens", roleCount, oaCached},
		{"usage.completion_tokens_details.reasoning_tokens", roleCount, oaReasoning},
		{"model", roleModel, 0},
		{"object", roleMark, 0},
	},
	tokens:      inOutTokens,
	doneIsFinal: true,
	mark: func(_ int, k jsontok.Kind, text []byte) (sure, final bool) {
		switch string(text) {
		case "chat.completion", "chat.completion.chunk", "text_completion", "list":
			return k == jsontok.String, false
		}
		return false, false
	},
}

// The counts of OpenAI's formats: Chat's prompt and completion tokens are Responses' input and
// output tokens.
const (
	oaPrompt = iota
	oaCompletion
	oaTotal
	oaCached    // among the prompt's
	oaReasoning // among the completion's
)

// inOutTokens makes the classes of OpenAI's counts: the cached tokens are taken from the prompt's,
// the reasoning tokens from the completion's, and a total above the two is counted as output.
// Embeddings have a prompt only; a response with a total only is counted as input.
func inOutTokens(c *counts) (Tokens, error) {
	var t Tokens
	p, o := c.get(oaPrompt), c.get(oaCompletion)
	if !c.has(oaPrompt) && !c.has(oaCompletion) {
		if !c.has(oaTotal) {
			return t, wrap(ErrMissing, "the usage has no prompt, completion or total tokens")
		}
		p = c.get(oaTotal)
	}
	k, r := c.get(oaCached), c.get(oaReasoning)
	if k > p {
		return t, wrap(ErrValue, "more cached tokens than prompt tokens")
	}
	if r > o {
		return t, wrap(ErrValue, "more reasoning tokens than completion tokens")
	}
	t[Input], t[CachedInput], t[Output], t[Reasoning] = p-k, k, o-r, r
	if total := c.get(oaTotal); total > p+o {
		t[Output] += total - p - o
	}
	return t, nil
}

// openAIResponses is OpenAI's Responses API: usage.input_tokens (with
// input_tokens_details.cached_tokens among them), usage.output_tokens (with
// output_tokens_details.reasoning_tokens among them) and usage.total_tokens, in the JSON body, or
// in a stream's response.completed event (response.incomplete or response.failed when it did not
// complete), which ends it, under response.usage.
var openAIResponses = &Format{
	Name: "openai-responses",
	fields: []field{
		{"usage.input_tokens", roleCount, oaPrompt},
		{"usage.output_tokens", roleCount, oaCompletion},
		{"usage.total_tokens", roleCount, oaTotal},
		{"usage.input_tokens_details.cached_tokens", roleCount, oaCached},
		{"usage.output_tokens_details.reasoning_tokens", roleCount, oaReasoning},
		{"response.usage.input_tokens", roleCount, oaPrompt},
		{"response.usage.output_tokens", roleCount, oaCompletion},
		{"response.usage.total_tokens", roleCount, oaTotal},
		{"response.usage.input_tokens_details.cached_tokens", roleCount, oaCached},
		{"response.usage.output_tokens_details.reasoning_tokens", roleCount, oaReasoning},
		{"model", roleModel, 0},
		{"response.model", roleModel, 0},
		{"object", roleMark, 0},
		{"type", roleMark, 1},
	},
	tokens: inOutTokens,
	mark: func(m int, k jsontok.Kind, text []byte) (sure, final bool) {
		s := string(text)
		if k != jsontok.String {
			return false, false
		}
		if m == 0 {
			return s == "response", false
		}
		switch s {
		case "response.completed", "response.incomplete", "response.failed":
			return true, true
		}
		return len(s) > 9 && s[:9] == "response.", false
	},
}
