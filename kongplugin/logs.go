package main

import (
	"context"
	"log"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/Kong/go-pdk"

	"github.com/diana-gw/diana/internal/lograte"
)

// newLog returns a logger writing to Kong's error log at most a line a second of each message
// (lograte), the next one with the count held back in its {suppressed}.
func newLog() *slog.Logger { return slog.New(lograte.New(kongLog{})) }

// kongLog is a slog.Handler writing records to Kong's error log as Kong's plain lines: the
// message is a template whose {key}s the record's attributes fill (one with no place is added
// as key=value), so that a message stays one kind of line whatever rule or client it names.
// A record whose context is a pdkCtx goes through that event's PDK, at the record's level;
// any other, to the plugin server's standard error, which Kong copies into its error log.
type kongLog struct{ attrs []slog.Attr }

func (kongLog) Enabled(context.Context, slog.Level) bool { return true }

func (h kongLog) Handle(ctx context.Context, r slog.Record) error {
	attrs := slices.Clip(h.attrs)
	r.Attrs(func(a slog.Attr) bool {
		attrs = append(attrs, a)
		return true
	})
	line := fill(r.Message, attrs)
	c, ok := ctx.(pdkCtx)
	switch {
	case !ok:
		log.Print(line)
		return nil
	case r.Level >= slog.LevelError:
		return c.kong.Log.Err(line)
	case r.Level >= slog.LevelWarn:
		return c.kong.Log.Warn(line)
	default:
		return c.kong.Log.Info(line)
	}
}

// fill returns the template t with each {key} replaced by the value of the attribute key (a
// value is not read as a template again), then the attributes it has no place for as key=value.
func fill(t string, attrs []slog.Attr) string {
	var b strings.Builder
	placed := make([]bool, len(attrs))
	for {
		open := strings.IndexByte(t, '{')
		n := strings.IndexByte(t[open+1:], '}') // the key's length
		if open < 0 || n < 0 {
			b.WriteString(t)
			break
		}
		i := slices.IndexFunc(attrs, func(a slog.Attr) bool { return a.Key == t[open+1:open+1+n] })
		if i < 0 { // no such attribute: the braces are text
			b.WriteString(t[:open+n+2])
		} else {
			b.WriteString(t[:open])
			b.WriteString(attrs[i].Value.String())
			placed[i] = true
		}
		t = t[open+n+2:]
	}
	for i, a := range attrs {
		if !placed[i] {
			b.WriteString(" " + a.String())
		}
	}
	return b.String()
}

func (h kongLog) WithAttrs(attrs []slog.Attr) slog.Handler {
	return kongLog{attrs: append(h.attrs[:len(h.attrs):len(h.attrs)], attrs...)}
}

// WithGroup returns h: the lines are flat.
func (h kongLog) WithGroup(string) slog.Handler { return h }

// pdkCtx is the context of a line logged during a Kong event, which kongLog writes through the
// event's PDK. It is the PDK pointer alone, so that making one allocates nothing (a
// context.WithValue would, for every line held back on the request path).
type pdkCtx struct{ kong *pdk.PDK }

func (pdkCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (pdkCtx) Done() <-chan struct{}       { return nil }
func (pdkCtx) Err() error                  { return nil }
func (pdkCtx) Value(any) any               { return nil }
