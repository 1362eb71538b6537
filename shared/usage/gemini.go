package usage

import "github.com/diana-gw/diana/shared/jsontok"

// gemini is Google's Gemini API (generativelanguage and Vertex AI): usageMetadata.promptTokenCount
// (with cachedContentTokenCount among them), candidatesTokenCount, thoughtsTokenCount,
// toolUsePromptTokenCount and totalTokenCount, in :generateContent's JSON body, and as running
// totals in every chunk of :streamGenerateContent (a text/event-stream with alt=sse, else a JSON
// array of chunks), whose last chunk gives a candidate's finishReason (or promptFeedback's
// blockReason, for a prompt refused).
var gemini = &Format{
	Name: "gemini",
	fields: []field{
		{"usageMetadata.promptTokenCount", roleCount, gmPrompt},
		{"usageMetadata.candidatesTokenCount", roleCount, gmCandidates},
		{"usageMetadata.totalTokenCount", roleCount, gmTotal},
		{"usageMetadata.cachedContentTokenCount", roleCount, gmCached},
		{"usageMetadata.thoughtsTokenCount", roleCount, gmThoughts},
		{"usageMetadata.toolUsePromptTokenCount", roleCount, gmToolPrompt},
		{"modelVersion", roleModel, 0},
		{"candidates.[].finishReason", roleMark, 0},
		{"promptFeedback.blockReason", roleMark, 0},
	},
	countsAreSure: true,
	arrayDocs:     true,
	tokens: func(c *counts) (Tokens, error) {
		var t Tokens
		p, k := c.get(gmPrompt), c.get(gmCached)
		if k > p {
			return t, wrap(ErrValue, "more cached tokens than prompt tokens")
		}
		t[Input], t[CachedInput] = min(p-k+c.get(gmToolPrompt), MaxValue), k
		t[Output], t[Reasoning] = c.get(gmCandidates), c.get(gmThoughts)
		if total := c.get(gmTotal); total > t.Sum() {
			t[Output] += total - t.Sum()
		}
		return t, nil
	},
	mark: func(_ int, k jsontok.Kind, _ []byte) (sure, final bool) {
		return k == jsontok.String, k == jsontok.String
	},
}

const (
	gmPrompt = iota
	gmCandidates
	gmTotal
	gmCached
	gmThoughts
	gmToolPrompt
)
