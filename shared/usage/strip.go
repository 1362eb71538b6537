package usage

import "github.com/diana-gw/diana/shared/jsontok"

// UsageChunks passes an OpenAI stream (text/event-stream) on event by event as a client that did
// not ask for its usage expects it, when a gateway asked for it on the client's behalf
// (stream_options.include_usage): without the chunk that carries only the usage ("choices": []
// and a "usage" object), and without the "usage": null that the other chunks then carry. It holds
// the event being read until its end, at most maxHold bytes: a longer event is passed on as it
// comes, unchecked.
type UsageChunks struct {
	ev        []byte
	through   bool // the event is longer than maxHold: passed on as it comes
	lineStart bool // at the start of a line
	cr        bool // the last byte was a CR
	ended     bool // ... which ended an event, whose LF is still to come
	dropped   bool // the last event was dropped
	started   bool
}

// maxHold bounds an event UsageChunks holds: a usage chunk is a few hundred bytes.
const maxHold = 64 << 10

// Write reads the next chunk of the stream and calls emit with the bytes to pass on, and with
// the usage chunk it drops (drop true), in the stream's order.
func (u *UsageChunks) Write(p []byte, emit func(b []byte, drop bool)) {
	if !u.started {
		u.started, u.lineStart = true, true
	}
	from := 0
	for i, c := range p {
		end := false
		switch {
		case c == '\n' && u.cr: // the LF of a CRLF
			u.cr = false
			if u.ended { // it belongs to the event its CR ended
				u.ended = false
				emit(p[i:i+1], u.dropped)
				from = i + 1
			}
			continue
		case c == '\r' || c == '\n':
			end = u.lineStart // an empty line ends the event
			u.lineStart, u.cr = true, c == '\r'
		default:
			u.lineStart, u.cr = false, false
		}
		u.ended = false
		if end {
			u.take(p[from:i+1], emit)
			u.flush(emit)
			from = i + 1
			u.ended = c == '\r'
		}
	}
	u.take(p[from:], emit)
}

// take adds p to the event being read, or passes it on if the event is too long to hold.
func (u *UsageChunks) take(p []byte, emit func(b []byte, drop bool)) {
	if len(p) == 0 {
		return
	}
	if !u.through && len(u.ev)+len(p) > maxHold {
		u.through = true
		if len(u.ev) > 0 {
			emit(u.ev, false)
			u.ev = u.ev[:0]
		}
	}
	if u.through {
		emit(p, false)
		return
	}
	u.ev = append(u.ev, p...)
}

// flush ends the event at an empty line.
func (u *UsageChunks) flush(emit func(b []byte, drop bool)) {
	u.dropped = false
	if !u.through && len(u.ev) > 0 {
		var a, b int
		u.dropped, a, b = inspect(u.ev)
		if a < b { // "usage": null, taken out
			u.ev = append(u.ev[:a], u.ev[b:]...)
		}
		emit(u.ev, u.dropped)
	}
	u.ev, u.through = u.ev[:0], false
}

// Close passes on what is held: an event the stream ended inside.
func (u *UsageChunks) Close(emit func(b []byte, drop bool)) {
	if len(u.ev) > 0 {
		emit(u.ev, false)
	}
	u.ev = u.ev[:0]
}

// inspect reads an event: drop reports whether its data is a chunk with no choices and a usage
// object; else [a, b) is the span of the event to take out: its top-level "usage": null member
// and a comma, when its data is one line (a == b: none).
func inspect(ev []byte) (drop bool, a, b int) {
	var c chunkCheck
	c.t.Reset(DefaultMaxDepth, 16)
	lines, at := 0, 0 // data lines, and where the first one's value starts in ev
	for rest := ev; len(rest) > 0; {
		line := rest
		for i, ch := range rest {
			if ch == '\n' || ch == '\r' {
				line = rest[:i]
				break
			}
		}
		start := len(ev) - len(rest)
		rest = rest[len(line):]
		if len(rest) > 0 {
			rest = rest[1:]
		}
		data, ok := cutPrefix(line, "data:")
		if !ok {
			continue
		}
		if len(data) > 0 && data[0] == ' ' {
			data = data[1:]
		}
		if lines > 0 {
			c.t.Feed([]byte{'\n'})
			if !c.read() {
				return false, 0, 0
			}
		}
		if lines == 0 {
			at = start + len(line) - len(data)
		}
		lines++
		c.t.Feed(data)
		if !c.read() {
			return false, 0, 0
		}
	}
	c.t.End()
	if lines == 0 || !c.read() || !c.t.Done() {
		return false, 0, 0
	}
	if c.emptyChoices && c.usage {
		return true, 0, 0
	}
	if lines != 1 || c.nullAt == c.nullEnd {
		return false, 0, 0
	}
	// Take out the member and the comma before it, or after it when it is the first.
	a, b = at+c.nullAt, at+c.nullEnd
	i := a - 1
	for i >= at && space(ev[i]) {
		i--
	}
	if ev[i] == ',' {
		return false, i, b
	}
	j := b
	for j < len(ev) && space(ev[j]) {
		j++
	}
	if j < len(ev) && ev[j] == ',' {
		return false, a, j + 1
	}
	return false, a, b
}

func space(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// chunkCheck reads a chunk's top-level "choices" and "usage".
type chunkCheck struct {
	t            jsontok.Tokenizer
	key          string // the top-level key whose value is being read
	keyAt        int    // where that key starts in the data
	open         bool   // the choices array has just opened
	emptyChoices bool
	usage        bool
	// nullAt and nullEnd span a top-level "usage": null member in the data.
	nullAt, nullEnd int
}

// read reads the tokens fed so far; false if the data is not JSON.
func (c *chunkCheck) read() bool {
	for {
		k := c.t.Next()
		switch {
		case k == jsontok.None:
			return true
		case k == jsontok.Error:
			return false
		case c.open:
			c.open, c.emptyChoices = false, k == jsontok.EndArray
		}
		d := c.t.Depth()
		switch {
		case k == jsontok.Key && d == 1:
			c.key, c.keyAt = string(c.t.Text()), int(c.t.Start())
		case k == jsontok.BeginArray && d == 2 && c.key == "choices":
			c.open = true
		case k == jsontok.BeginObject && d == 2 && c.key == "usage":
			c.usage = true
		case k == jsontok.Null && d == 1 && c.key == "usage":
			c.nullAt, c.nullEnd = c.keyAt, int(c.t.Offset())
		}
	}
}

func cutPrefix(b []byte, p string) ([]byte, bool) {
	if len(b) < len(p) || string(b[:len(p)]) != p {
		return b, false
	}
	return b[len(p):], true
}
