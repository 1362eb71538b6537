// Package usage reads what an LLM request used from its response, and what a gateway must know of
// the request beforehand. A response's usage is read from a header, from a field path of a JSON
// body or of a stream's usage event ("usage.total_tokens", or a sum
// "usage.input_tokens+usage.output_tokens": Fields), or in a provider's own format (Format:
// OpenAI's Chat, Completions and Embeddings, OpenAI's Responses, Anthropic's Messages, Gemini,
// Ollama; each one small table), whose counts become token classes (Tokens) that Rates price. A
// request's model, output cap and stream options are read by ReadRequest, which also edits a
// streamed OpenAI request to ask for its usage; UsageChunks takes that usage back out of what the
// client receives.
//
// A body is read incrementally: a Reader is an io.Writer fed the body chunk by chunk as it passes
// to the client, and never keeps it. It reads the body's documents — one JSON document, a
// text/event-stream's events, JSON lines — with shared/jsontok, the project's one JSON
// tokenizer, and follows the few paths it wants with a walker that keeps one frame per open
// object or array; the tokenizer keeps at most 256 bytes of a key or a string. So memory is
// bounded by Limits whatever the body: enormous, endless, or one line of a gigabyte.
//
// Bad input is an error, never a guess: a value that is negative, fractional, written with an
// exponent, above MaxValue (10^15, algos.MaxCount) or not a number; a running count that goes
// down; a path found twice (a duplicate key, a second event carrying usage unless the last
// counts); invalid JSON or UTF-8; nesting deeper than MaxDepth; a body longer than MaxBytes; a
// body cut before its JSON value ends, or a stream before its provider's end; no usage at all.
// Every error wraps one of the Err values below, for a metric's label, and names the path. The
// caller then charges the rule's fallback: nothing is free. Write never fails, so that a body the
// reader gives up on still reaches the client untouched.
//
// The package uses only the standard library (no reflection) and shared/jsontok: TinyGo builds it
// into the Envoy filter.
package usage

import (
	"errors"
	"strings"
)

// MaxValue is the largest token count, or sum of counts, the reader accepts: algos.MaxCount,
// stated here again to keep this package free of imports (a test ties the two).
const MaxValue int64 = 1_000_000_000_000_000

// The classes of error; every error the package returns wraps one of them.
var (
	// ErrMissing: the response ended without the usage (no such header, no such field, no
	// event carrying it, an empty body).
	ErrMissing = errors.New("usage missing")
	// ErrValue: the usage is there but is not a whole number of tokens in [0, MaxValue].
	ErrValue = errors.New("usage value invalid")
	// ErrDuplicate: a path found twice (a duplicate key, a repeated header, a second event
	// carrying usage), so which one counts is the upstream's guess.
	ErrDuplicate = errors.New("usage given twice")
	// ErrSyntax: the body is not valid JSON (or valid UTF-8) where usage is read from it.
	ErrSyntax = errors.New("usage body malformed")
	// ErrDepth: the JSON nests deeper than Limits.MaxDepth.
	ErrDepth = errors.New("usage body nested too deep")
	// ErrTooLarge: the body is longer than Limits.MaxBytes.
	ErrTooLarge = errors.New("usage body too large")
	// ErrTruncated: the body ended inside its JSON value.
	ErrTruncated = errors.New("usage body cut short")
)

// clip shortens s for an error message.
func clip(s string) string {
	if len(s) > 24 {
		return s[:24] + "…"
	}
	return s
}

// usageError is an error of class cls (ErrMissing...) with what and where.
type usageError struct {
	cls error
	msg string
}

func (e *usageError) Error() string { return e.cls.Error() + ": " + e.msg }
func (e *usageError) Unwrap() error { return e.cls }

func wrap(cls error, msg string) error { return &usageError{cls: cls, msg: msg} }

// wrapErr prefixes a usageError's message with where it was found.
func wrapErr(err error, where string) error {
	if u, ok := err.(*usageError); ok { // a type switch: errors.As would link reflection into TinyGo builds
		return &usageError{cls: u.cls, msg: where + ": " + u.msg}
	}
	return err
}

// Class returns the name of err's class for a metric label: "missing", "value", "duplicate",
// "syntax", "depth", "too_large", "truncated", or "other".
func Class(err error) string {
	for _, c := range classes {
		if errors.Is(err, c.err) {
			return c.name
		}
	}
	return "other"
}

var classes = [...]struct {
	err  error
	name string
}{
	{ErrMissing, "missing"}, {ErrValue, "value"}, {ErrDuplicate, "duplicate"}, {ErrSyntax, "syntax"},
	{ErrDepth, "depth"}, {ErrTooLarge, "too_large"}, {ErrTruncated, "truncated"},
}

// ClassOf returns the error class that text, an error's Error() sent by another process (the
// Envoy filter to dianad's /v1/settle), begins with; nil for none.
func ClassOf(text string) error {
	for _, c := range classes {
		if strings.HasPrefix(text, c.err.Error()) {
			return c.err
		}
	}
	return nil
}
