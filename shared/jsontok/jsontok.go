// Package jsontok reads JSON (RFC 8259, strictly) as a sequence of tokens, from input pushed to it
// in chunks of any size: a whole config document at once, or an LLM response's body as it passes
// through a gateway, which proxy-wasm hands a filter one chunk at a time. It is the one JSON
// tokenizer of the project: shared/conf builds its config tree on it, shared/usage reads token
// counts from response bodies and streams with it.
//
// A Tokenizer keeps the state of one document between chunks: its open objects and arrays (one
// byte each, at most MaxDepth of them), where it is in the token being read, and that token's
// text, of which it keeps at most MaxText bytes (all of it when MaxText is 0). Nothing else grows
// with the input, so a caller that bounds MaxText reads documents of any size in bounded memory.
//
// It is strict: exactly one value, surrounded by whitespace only (space, tab, CR, LF); no
// comments, trailing commas, NaN, leading zeros, byte order mark, or unescaped control characters;
// strings must be valid UTF-8. Escaped UTF-16 surrogate pairs decode to their character and a
// lone escaped surrogate to U+FFFD, as in encoding/json. Every error is a *SyntaxError with its
// offset. The files: jsontok.go the tokens and the structure between them, number.go and string.go
// the two tokens with grammars of their own, errors.go what goes wrong and its message.
//
// The package uses only the standard library's strconv and unicode/utf8, and no reflection: TinyGo
// builds it into the Envoy filter.
package jsontok

// Kind is the kind of a token.
type Kind uint8

const (
	// None: no token before the input fed so far ran out; feed more. After End, None means the
	// document is complete.
	None Kind = iota
	BeginObject
	EndObject
	BeginArray
	EndArray
	Key    // an object's key; Text is its decoded text
	String // a string value; Text is its decoded text
	Number // Text is the number as written
	True
	False
	Null
	// Error: the input is not JSON; Err says why and where. Every later call returns Error.
	Error
)

var kindNames = [...]string{"none", "{", "}", "[", "]", "key", "string", "number", "true", "false", "null", "error"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "Kind(?)"
}

// DefaultMaxDepth is the deepest nesting of objects and arrays a Tokenizer reads unless told
// otherwise: configs and LLM responses nest a handful of levels.
const DefaultMaxDepth = 64

// Tokenizer reads one JSON document's tokens. Its zero value reads with DefaultMaxDepth and no
// bound on a token's text; Reset sets other bounds. It is not safe for concurrent use.
type Tokenizer struct {
	maxDepth int
	maxText  int

	in   []byte // the chunk being read
	pos  int    // the next byte of in
	base int64  // the document offset of in[0]
	eof  bool   // End was called: the input ends with in

	stack []bool // the open containers, true for an object
	state uint8
	began bool // a byte other than whitespace was read
	comma bool // the last structural byte was a ',' (for the message of a trailing comma)

	// The token being read, or the last one returned.
	start  int64  // the document offset of its first byte
	text   []byte // its text when not a slice of in
	textIn int    // >= 0: its text so far is in[textIn:pos], not copied yet; -1: in text
	tok    []byte // the text of the token Next returned
	long   bool   // its text was longer than maxText and was cut
	isKey  bool
	plain  bool // a string without escapes whose text lies in one chunk

	// Strings: an escape, a UTF-8 sequence or a surrogate pair under way.
	esc      uint8 // 0 none; 1 after '\'; 2 to 5 reading the hex digits of \u
	escStart int64 // the offset of the escape's '\'
	escBuf   [6]byte
	hex      rune
	highSur  rune  // a \u high surrogate awaiting its low half
	seqStart int64 // the offset of the UTF-8 sequence under way
	u8need   byte  // continuation bytes still due
	u8lo     byte  // the range of the next continuation byte
	u8hi     byte

	num uint8  // the number's grammar state (numStart...)
	lit string // the literal being read: "true", "false" or "null"
	// litPos is how much of lit has been read.
	litPos int

	err *SyntaxError
}

// The states between tokens and within one.
const (
	stValue        = iota // a value must start
	stValueOrClose        // after '['
	stKeyOrClose          // after '{'
	stKey                 // after ',' in an object
	stColon               // after a key
	stAfter               // after a value in a container: ',' or its close
	stEnd                 // after the top-level value: whitespace only
	stString
	stNumber
	stLiteral    // reading true, false or null
	stLiteralEnd // the literal is read; the next byte must not continue a word
)

// Reset makes t read a new document, keeping its memory: at most maxDepth nested objects and
// arrays (DefaultMaxDepth if 0 or less) and at most maxText bytes of a token's text (no bound if
// 0 or less; a longer text is cut, and Long reports it).
func (t *Tokenizer) Reset(maxDepth, maxText int) {
	if maxDepth <= 0 {
		maxDepth = DefaultMaxDepth
	}
	*t = Tokenizer{maxDepth: maxDepth, maxText: max(maxText, 0), stack: t.stack[:0], text: t.text[:0], textIn: -1}
}

// Feed gives t the next chunk of the document, which Next then reads. t keeps p until the next
// Feed: Text may return a slice of it.
func (t *Tokenizer) Feed(p []byte) {
	t.keep()
	t.base += int64(len(t.in))
	t.in, t.pos = p, 0
}

// End says the document ends with the chunk fed last: Next then reads the rest of that chunk,
// returns the tokens that the end completes (a number), and then None if the document was a whole
// JSON value, or Error.
func (t *Tokenizer) End() { t.eof = true }

// keep copies the text of a token under way out of the chunk that is about to go.
func (t *Tokenizer) keep() {
	if t.textIn >= 0 && t.pos <= len(t.in) && t.textIn <= t.pos {
		t.appendText(t.in[t.textIn:t.pos])
		t.textIn = -1
		if t.state == stString {
			t.plain = false
		}
	}
}

// Text returns the text of the Key, String or Number token Next returned last: a string's decoded
// bytes, a number as written; at most MaxText bytes of it. It is valid until the next call of
// Next, Feed or Reset, and may be a slice of the chunk fed.
func (t *Tokenizer) Text() []byte { return t.tok }

// Long reports whether the last token's text was longer than MaxText, and Text holds its start.
func (t *Tokenizer) Long() bool { return t.long }

// Plain reports whether the last String or Key had no escapes and lay in one chunk: its text is
// then the input between Start()+1 and Offset()-1, which a caller holding the document may slice.
func (t *Tokenizer) Plain() bool { return t.plain }

// Start returns the document offset of the last token's first byte.
func (t *Tokenizer) Start() int64 { return t.start }

// Offset returns the document offset of the next byte to read.
func (t *Tokenizer) Offset() int64 { return t.base + int64(t.pos) }

// Depth returns the number of objects and arrays open.
func (t *Tokenizer) Depth() int { return len(t.stack) }

// InObject reports whether the innermost open container is an object.
func (t *Tokenizer) InObject() bool { return len(t.stack) > 0 && t.stack[len(t.stack)-1] }

// Started reports whether the document has begun: a byte other than whitespace was read.
func (t *Tokenizer) Started() bool { return t.began }

// Done reports whether the top-level value is complete.
func (t *Tokenizer) Done() bool { return t.state == stEnd }

// Err returns the error Next returned, or nil.
func (t *Tokenizer) Err() *SyntaxError { return t.err }

// Next returns the next token of the input fed so far, or None when it needs more.
func (t *Tokenizer) Next() Kind {
	if t.err != nil {
		return Error
	}
	for {
		switch t.state {
		case stString:
			if k := t.readString(); k != None {
				return k
			}
		case stNumber:
			if k := t.readNumber(); k != None {
				return k
			}
		case stLiteral, stLiteralEnd:
			if k := t.readLiteral(); k != None {
				return k
			}
		}
		if t.err != nil {
			return Error
		}
		if t.state == stString || t.state == stNumber || t.state == stLiteral || t.state == stLiteralEnd {
			return None // the chunk ended inside the token (readX says when the input ended)
		}
		for t.pos < len(t.in) && space(t.in[t.pos]) {
			t.pos++
		}
		if t.pos == len(t.in) {
			if t.eof {
				return t.atEnd()
			}
			return None
		}
		if k := t.structural(t.in[t.pos]); k != None || t.err != nil {
			if t.err != nil {
				return Error
			}
			return k
		}
	}
}

// structural reads c, the next byte between tokens.
func (t *Tokenizer) structural(c byte) Kind {
	t.began = true
	switch t.state {
	case stValue:
		return t.startValue(c, codeValue)
	case stValueOrClose:
		if c == ']' {
			return t.close()
		}
		return t.startValue(c, codeValue)
	case stKeyOrClose, stKey:
		switch {
		case c == '"':
			t.startString(true)
			return None
		case c == '}' && t.state == stKeyOrClose:
			return t.close()
		case t.state == stKeyOrClose:
			return t.fail(codeKeyOrClose)
		case c == '}':
			return t.fail(codeKeyTrailingComma)
		}
		return t.fail(codeKey)
	case stColon:
		if c != ':' {
			return t.fail(codeColon)
		}
		t.pos++
		t.state, t.comma = stValue, false
	case stAfter:
		obj := t.stack[len(t.stack)-1]
		switch {
		case c == ',':
			t.pos++
			t.comma = true
			if obj {
				t.state = stKey
			} else {
				t.state = stValue
			}
		case c == '}' && obj, c == ']' && !obj:
			return t.close()
		case obj:
			return t.fail(codeCommaOrBrace)
		default:
			return t.fail(codeCommaOrBracket)
		}
	case stEnd:
		return t.fail(codeTrailing)
	}
	return None
}

// startValue starts the value whose first byte is c; code is the error when c starts none.
func (t *Tokenizer) startValue(c byte, code errCode) Kind {
	t.start = t.Offset()
	switch c {
	case '{', '[':
		if len(t.stack) >= t.maxDepth {
			return t.fail(codeDepth)
		}
		t.pos++
		t.stack = append(t.stack, c == '{')
		t.comma = false
		if c == '{' {
			t.state = stKeyOrClose
			return BeginObject
		}
		t.state = stValueOrClose
		return BeginArray
	case '"':
		t.startString(false)
	case 't':
		t.state, t.lit, t.litPos = stLiteral, "true", 0
	case 'f':
		t.state, t.lit, t.litPos = stLiteral, "false", 0
	case 'n':
		t.state, t.lit, t.litPos = stLiteral, "null", 0
	default:
		if c != '-' && !digit(c) {
			if c == ']' && t.comma && !t.InObject() && len(t.stack) > 0 {
				return t.fail(codeValueTrailingComma)
			}
			return t.fail(code)
		}
		t.state = stNumber
		t.num = numInt
		if c == '-' {
			t.num = numMinus
		} else if c == '0' {
			t.num = numZero
		}
		t.pos++
		t.long, t.text, t.textIn = false, t.text[:0], t.pos-1
	}
	return None
}

// close ends the innermost container.
func (t *Tokenizer) close() Kind {
	t.start = t.Offset()
	t.pos++
	obj := t.stack[len(t.stack)-1]
	t.stack = t.stack[:len(t.stack)-1]
	t.valueDone()
	if obj {
		return EndObject
	}
	return EndArray
}

// valueDone moves past a finished value.
func (t *Tokenizer) valueDone() {
	t.comma = false
	if len(t.stack) == 0 {
		t.state = stEnd
	} else {
		t.state = stAfter
	}
}

// atEnd is Next at the end of the input, between tokens.
func (t *Tokenizer) atEnd() Kind {
	switch t.state {
	case stEnd:
		return None
	case stValue:
		if len(t.stack) == 0 {
			return t.fail(codeEmpty)
		}
		return t.fail(codeValue)
	case stValueOrClose:
		return t.fail(codeValue)
	case stKeyOrClose:
		return t.fail(codeKeyOrClose)
	case stKey:
		return t.fail(codeKey)
	case stColon:
		return t.fail(codeColon)
	case stAfter:
		if t.stack[len(t.stack)-1] {
			return t.fail(codeCommaOrBrace)
		}
		return t.fail(codeCommaOrBracket)
	}
	return t.fail(codeValue)
}

// readLiteral reads true, false or null, and the byte after it.
func (t *Tokenizer) readLiteral() Kind {
	for t.state == stLiteral && t.pos < len(t.in) {
		if t.in[t.pos] != t.lit[t.litPos] {
			return t.failAt(t.start, codeValue)
		}
		t.pos++
		if t.litPos++; t.litPos == len(t.lit) {
			t.state = stLiteralEnd
		}
	}
	if t.state == stLiteral {
		if t.eof {
			return t.failAt(t.start, codeValue)
		}
		return None
	}
	if t.pos < len(t.in) && wordByte(t.in[t.pos]) { // "nullx", "true1"
		return t.failAt(t.start, codeValue)
	}
	if t.pos == len(t.in) && !t.eof {
		return None
	}
	t.valueDone()
	switch t.lit {
	case "true":
		return True
	case "false":
		return False
	}
	return Null
}

func (t *Tokenizer) fail(code errCode) Kind { return t.failAt(t.Offset(), code) }

// failAt records the error code at offset off and returns Error.
func (t *Tokenizer) failAt(off int64, code errCode) Kind {
	e := &SyntaxError{Offset: off, code: code, maxDepth: t.maxDepth, cut: t.eof && t.pos == len(t.in)}
	if i := off - t.base; i >= 0 && i < int64(len(t.in)) {
		e.Byte, e.HasByte = t.in[i], true
	}
	switch code {
	case codeEscapeUnknown, codeEscapeControl, codeEscapeHex:
		e.esc = t.escBuf
		e.escLen = min(int(t.esc)+1, len(t.escBuf))
		if code != codeEscapeHex {
			e.escLen = 2
		}
	case codeNumMinus, codeNumLeadingZero, codeNumDot, codeNumExponent, codeNumWord:
		t.finishText()
		e.text = string(t.tok)
		if t.pos < len(t.in) {
			e.text += string(t.in[t.pos])
		}
	case codeValue:
		if t.state == stLiteral || t.state == stLiteralEnd {
			e.text = t.lit[:t.litPos]
			if t.pos < len(t.in) {
				e.text += string(t.in[t.pos])
			}
		}
	}
	t.err = e
	return Error
}

func space(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func digit(c byte) bool { return '0' <= c && c <= '9' }

// wordByte reports whether c would continue a word: a number or a literal followed by one is
// misspelt ("10ms", "nullx"), not a value followed by something else.
func wordByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || digit(c) || c == '_' || c == '.' || c == '+' || c == '-'
}
