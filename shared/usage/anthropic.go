package usage

import "github.com/diana-gw/diana/shared/jsontok"

// anthropic is Anthropic's Messages API: usage.input_tokens (the prompt's tokens neither read from
// nor written to the cache), usage.cache_creation_input_tokens (with
// cache_creation.ephemeral_1h_input_tokens, the one-hour cache's, among them),
// usage.cache_read_input_tokens and usage.output_tokens (thinking included). A stream gives them in message_start's message.usage,
// then in one or more message_delta events' usage as running totals (several when server tools
// run; a delta may leave out the input counts, which keep their message_start values), and ends
// at message_stop.
var anthropic = &Format{
	Name: "anthropic",
	fields: []field{
		{"usage.input_tokens", roleCount, anInput},
		{"usage.output_tokens", roleCount, anOutput},
		{"usage.cache_creation_input_tokens", roleCount, anCacheWrite},
		{"usage.cache_read_input_tokens", roleCount, anCacheRead},
		{"usage.cache_creation.ephemeral_1h_input_tokens", roleCount, anCacheWrite1h},
		{"message.usage.input_tokens", roleCount, anInput},
		{"message.usage.output_tokens", roleCount, anOutput},
		{"message.usage.cache_creation_input_tokens", roleCount, anCacheWrite},
		{"message.usage.cache_read_input_tokens", roleCount, anCacheRead},
		{"message.usage.cache_creation.ephemeral_1h_input_tokens", roleCount, anCacheWrite1h},
		{"model", roleModel, 0},
		{"message.model", roleModel, 0},
		{"type", roleMark, 0},
	},
	tokens: func(c *counts) (Tokens, error) {
		var t Tokens
		if !c.has(anInput) && !c.has(anOutput) {
			return t, wrap(ErrMissing, "the usage has no input or output tokens")
		}
		w, w1h := c.get(anCacheWrite), c.get(anCacheWrite1h)
		if w1h > w {
			return t, wrap(ErrValue, "more one-hour cache writes than cache writes")
		}
		t[Input], t[CacheWrite], t[CacheWrite1h], t[CachedInput], t[Output] = c.get(anInput), w-w1h, w1h, c.get(anCacheRead), c.get(anOutput)
		return t, nil
	},
	mark: func(_ int, k jsontok.Kind, text []byte) (sure, final bool) {
		if k != jsontok.String {
			return false, false
		}
		switch string(text) {
		case "message_stop":
			return true, true
		case "message", "message_start", "message_delta", "content_block_start", "content_block_delta", "content_block_stop", "ping":
			return true, false
		}
		return false, false
	},
}

const (
	anInput = iota
	anOutput
	anCacheWrite
	anCacheRead
	anCacheWrite1h
)
