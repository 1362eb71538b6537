// Package lograte keeps a flood of events from flooding a log: at most one line a second per
// kind of event, the next one saying how many were held back. The metrics count every event;
// the log shows that they happen, and why.
//
// Handler is the whole of it: a slog.Handler that wraps another and lets through at most one
// record a second of each kind, adding to it the count of that kind held back since, as
// "suppressed". A record's kind is its message: a message names what happened, and the event's
// values go in attributes (or in a template's placeholders, for a handler that fills them). A
// front end logs the events that can come with every request through a logger on a Handler,
// and keeps its plain logger for the lines that must never be dropped (startup, reloads,
// shutdown); a call site is then one plain log call.
//
// A record held back still costs its building. On a request path, write it with LogAttrs and
// typed attributes (slog.String, slog.Int64, slog.Any of an error), which allocate nothing; a
// line that costs more to build (more than five attributes, a value formatted for it) asks Due
// first.
package lograte

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Handler rate-limits the records it passes to the handler it wraps. It is safe for
// concurrent use, and the handlers WithAttrs and WithGroup make from it share its kinds.
type Handler struct {
	next  slog.Handler
	kinds *kinds
}

// New returns a Handler passing records to h.
func New(h slog.Handler) *Handler { return &Handler{next: h, kinds: &kinds{}} }

// Enabled reports whether the wrapped handler handles records of the level.
func (h *Handler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

// Handle passes r on with the count of its kind held back since the last one that passed, or
// holds it back (and counts it) if one of its kind passed less than a second ago.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	ok, held := h.kinds.get(r.Message).allow()
	if !ok {
		return nil
	}
	r = r.Clone() // the caller's copy stays as it was
	r.AddAttrs(slog.Int64("suppressed", held))
	return h.next.Handle(ctx, r)
}

func (h *Handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &Handler{next: h.next.WithAttrs(attrs), kinds: h.kinds}
}

func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{next: h.next.WithGroup(name), kinds: h.kinds}
}

// Due reports whether a record of l at level with the message msg would be logged now. When
// its kind is held back, the event counts as held back, as if its record had been: a caller
// whose record costs to build asks first and logs only when Due. If l's handler is no Handler,
// Due is whether l logs the level.
func Due(l *slog.Logger, level slog.Level, msg string) bool {
	if !l.Enabled(context.Background(), level) {
		return false
	}
	h, ok := l.Handler().(*Handler)
	return !ok || h.kinds.get(msg).due()
}

// maxKinds bounds the kinds a Handler tells apart. The messages beyond share one kind: a message
// built from each event's values can neither grow the table nor flood the log.
const maxKinds = 1000

// kinds holds a limiter per message.
type kinds struct {
	m     sync.Map // message → *limiter
	n     atomic.Int64
	other limiter // the messages beyond maxKinds
}

func (k *kinds) get(msg string) *limiter {
	if l, ok := k.m.Load(msg); ok {
		return l.(*limiter)
	}
	if k.n.Load() >= maxKinds {
		return &k.other
	}
	l, loaded := k.m.LoadOrStore(msg, new(limiter))
	if !loaded {
		k.n.Add(1)
	}
	return l.(*limiter)
}

// limiter lets at most one event a second through. Its zero value is ready.
type limiter struct {
	next    atomic.Int64 // unix ns from which the next event may pass
	skipped atomic.Int64
}

// allow reports whether an event may be logged now, and how many were held back since the last
// one that was.
func (l *limiter) allow() (ok bool, skipped int64) {
	now := time.Now().UnixNano()
	next := l.next.Load()
	if now < next || !l.next.CompareAndSwap(next, now+int64(time.Second)) {
		l.skipped.Add(1)
		return false, 0
	}
	return true, l.skipped.Swap(0)
}

// due reports whether an event would be allowed now, counting it as held back if not.
func (l *limiter) due() bool {
	if time.Now().UnixNano() < l.next.Load() {
		l.skipped.Add(1)
		return false
	}
	return true
}
