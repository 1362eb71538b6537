package usage

import "github.com/diana-gw/diana/shared/jsontok"

// ollama is Ollama's own API (/api/chat, /api/generate, /api/embed): prompt_eval_count and
// eval_count, in the JSON body, or in the last object of an application/x-ndjson stream, the one
// with done: true, which ends it. A prompt Ollama found in its cache may come without
// prompt_eval_count.
var ollama = &Format{
	Name: "ollama",
	fields: []field{
		{"prompt_eval_count", roleCount, olPrompt},
		{"eval_count", roleCount, olEval},
		{"model", roleModel, 0},
		{"done", roleMark, 0},
	},
	countsAreSure: true,
	tokens: func(c *counts) (Tokens, error) {
		var t Tokens
		t[Input], t[Output] = c.get(olPrompt), c.get(olEval)
		return t, nil
	},
	mark: func(_ int, k jsontok.Kind, _ []byte) (sure, final bool) {
		return k == jsontok.True || k == jsontok.False, k == jsontok.True
	},
}

const (
	olPrompt = iota
	olEval
)
