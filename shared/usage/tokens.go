package usage

// A TokenClass is a kind of token that providers count, and price, apart. The classes are disjoint: a
// response's tokens are the sum of its classes, whatever a provider's own fields overlap (OpenAI's
// prompt_tokens hold its cached tokens, Anthropic's input_tokens do not: each format reads its
// provider's fields into these).
type TokenClass uint8

const (
	// Input: prompt tokens neither read from nor written to the provider's cache.
	Input TokenClass = iota
	// CachedInput: prompt tokens read from the cache (OpenAI's cached_tokens, Anthropic's
	// cache_read_input_tokens, Gemini's cachedContentTokenCount).
	CachedInput
	// CacheWrite: prompt tokens written to the cache (Anthropic's cache_creation_input_tokens,
	// but those of CacheWrite1h).
	CacheWrite
	// CacheWrite1h: prompt tokens written to Anthropic's one-hour cache, which costs more
	// (usage.cache_creation.ephemeral_1h_input_tokens).
	CacheWrite1h
	// Output: completion tokens other than reasoning.
	Output
	// Reasoning: reasoning ("thinking") tokens, where the provider counts them apart (OpenAI's
	// reasoning_tokens, Gemini's thoughtsTokenCount); Anthropic counts them in its output.
	Reasoning
	// NumClasses is the number of classes.
	NumClasses
)

// ClassNames are the classes as a config names them, in their order.
var ClassNames = [NumClasses]string{"input", "cached_input", "cache_write", "cache_write_1h", "output", "reasoning"}

func (c TokenClass) String() string {
	if c < NumClasses {
		return ClassNames[c]
	}
	return "TokenClass(?)"
}

// Tokens counts a response's tokens by class, each in [0, MaxValue].
type Tokens [NumClasses]int64

// Sum returns the tokens of every class, at most NumClasses × MaxValue: no overflow.
func (t Tokens) Sum() int64 {
	var s int64
	for _, n := range t {
		s += n
	}
	return s
}

// Usage is what a response says it used: its tokens by class, and the model that answered when
// the response names it.
type Usage struct {
	Tokens Tokens
	// Model is the model the response names (OpenAI's and Anthropic's model, Gemini's
	// modelVersion), at most 256 bytes; "" when it names none.
	Model string
	// Format is the name of the format the response was read as ("" for a Fields sum): for
	// FormatAuto, the one it chose.
	Format string
}
