// Package usage reads the cost of a request from its response: the tokens an LLM upstream says
// it used, from a response header, from a field path of a JSON body ("usage.total_tokens", or a
// sum "usage.input_tokens+usage.output_tokens"), or from the data: event of a streamed
// text/event-stream body that carries that path (OpenAI's last chunk with stream_options
// include_usage, Anthropic's message_delta), or from the last of the events that carry it, for
// an upstream that sends its running total in every event (vLLM's continuous_usage_stats;
// Events).
//
// A body is read incrementally: a Reader is an io.Writer fed the body chunk by chunk as it
// passes to the client, and never keeps it. It holds a push-down JSON scanner (one byte of
// state per open object or array, at most Limits.MaxDepth of them) and, for a stream, the SSE
// line state (a field name of at most five bytes); nothing else grows with the body. A token
// count is parsed as its digits arrive. So memory is bounded by Limits whatever the body:
// enormous, endless, or one line of a gigabyte.
//
// Bad input is an error, never a guess: a value that is negative, fractional, written with an
// exponent, above MaxValue (10^15, algos.MaxCount) or not a number; a path found twice (a
// duplicate key, a second event carrying usage unless the last counts); invalid JSON or UTF-8;
// nesting deeper than MaxDepth; a body longer than MaxBytes; a body cut before its JSON value
// ends; no usage at all. Every error wraps one of the Err values below, for a metric's label,
// and names the path.
// The caller then charges the rule's estimate or fallback: nothing is free. Write never fails,
// so that a body the reader gives up on still reaches the client untouched.
//
// The package uses only the standard library's unicode/utf8, errors and strconv: TinyGo builds
// it into the Envoy filter.
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
