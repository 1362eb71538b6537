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
// lone escaped surrogate to U+FFFD, as in encoding/json. Every error is an *SyntaxError with its offset.
//
// The package uses only the standard library's strconv and unicode/utf8, and no reflection: TinyGo
// builds it into the Envoy filter.
package jsontok

import "unicode/utf8"

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
	u8need   uint8 // continuation bytes still due
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

// The number grammar -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?, a state per position.
const (
	numMinus = iota // "-"
	numZero         // a leading "0": no more integer digits
	numInt          // integer digits
	numDot          // "."
	numFrac         // fraction digits
	numE            // "e" or "E"
	numESign        // the exponent's sign
	numExp          // exponent digits
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

// readNumber reads a number's bytes; the number ends at the first byte that continues no number.
func (t *Tokenizer) readNumber() Kind {
	from := t.pos
	for ; t.pos < len(t.in); t.pos++ {
		c := t.in[t.pos]
		next, ok := numStep(t.num, c)
		if ok {
			t.num = next
			continue
		}
		t.spill(from)
		if code := numError(t.num, c); code != 0 {
			return t.failAt(t.start, code)
		}
		return t.endNumber()
	}
	t.spill(from)
	if !t.eof {
		return None
	}
	if code := numError(t.num, 0); code != 0 {
		return t.failAt(t.start, code)
	}
	return t.endNumber()
}

// spill adds the number's bytes read from in[from:] to its text, when its text is no longer a
// slice of the chunk (it began in an earlier one).
func (t *Tokenizer) spill(from int) {
	if t.textIn < 0 && from < t.pos {
		t.appendText(t.in[from:t.pos])
	}
}

// endNumber returns the number read.
func (t *Tokenizer) endNumber() Kind {
	t.finishText()
	t.valueDone()
	return Number
}

// numStep returns the grammar state after c, and false if c continues no number from s.
func numStep(s uint8, c byte) (uint8, bool) {
	switch s {
	case numMinus:
		switch {
		case c == '0':
			return numZero, true
		case digit(c):
			return numInt, true
		}
	case numZero, numInt:
		switch {
		case digit(c) && s == numInt:
			return numInt, true
		case c == '.':
			return numDot, true
		case c == 'e' || c == 'E':
			return numE, true
		}
	case numDot, numFrac:
		switch {
		case digit(c):
			return numFrac, true
		case (c == 'e' || c == 'E') && s == numFrac:
			return numE, true
		}
	case numE:
		switch {
		case c == '+' || c == '-':
			return numESign, true
		case digit(c):
			return numExp, true
		}
	case numESign, numExp:
		if digit(c) {
			return numExp, true
		}
	}
	return s, false
}

// numError returns the error of a number in state s followed by c (0: the input's end), or 0 when
// the number is whole and c ends it.
func numError(s uint8, c byte) errCode {
	switch s {
	case numMinus:
		return codeNumMinus
	case numDot:
		return codeNumDot
	case numE, numESign:
		return codeNumExponent
	case numZero:
		if digit(c) {
			return codeNumLeadingZero
		}
	}
	if c != 0 && wordByte(c) { // "0x1F", "1.2.3", "10ms"
		return codeNumWord
	}
	return 0
}

// IsNumber reports whether s is a whole JSON number, by the grammar Next reads numbers with.
func IsNumber(s string) bool {
	if s == "" || s[0] != '-' && !digit(s[0]) {
		return false
	}
	st := uint8(numInt)
	switch s[0] {
	case '-':
		st = numMinus
	case '0':
		st = numZero
	}
	for i := 1; i < len(s); i++ {
		next, ok := numStep(st, s[i])
		if !ok {
			return false
		}
		st = next
	}
	return numError(st, 0) == 0
}

// startString starts a string or a key at its opening quote.
func (t *Tokenizer) startString(key bool) {
	t.start = t.Offset()
	t.pos++
	t.state, t.isKey, t.plain = stString, key, true
	t.long, t.text, t.textIn = false, t.text[:0], t.pos
	t.esc, t.highSur, t.u8need = 0, 0, 0
}

// readString reads a string's bytes up to its closing quote.
func (t *Tokenizer) readString() Kind {
	in := t.in
	for t.pos < len(in) {
		if t.esc == 0 && t.u8need == 0 && t.highSur == 0 {
			// Most of a string is printable ASCII with no meaning of its own: read in bulk.
			j := t.pos
			for j < len(in) && plain(in[j]) {
				j++
			}
			if j > t.pos {
				if t.textIn < 0 {
					t.appendText(in[t.pos:j])
				}
				t.pos = j
				continue
			}
		}
		c := in[t.pos]
		switch {
		case t.u8need > 0:
			if c < t.u8lo || c > t.u8hi {
				return t.failAt(t.seqStart, codeUTF8)
			}
			t.u8need--
			t.u8lo, t.u8hi = 0x80, 0xBF
			t.addByte(c)
		case t.esc > 0:
			if code := t.escape(c); code != 0 {
				return t.failAt(t.escStart, code)
			}
		case c == '\\':
			t.toText()
			t.esc, t.escStart = 1, t.Offset()
			t.escBuf[0] = c
		case t.highSur != 0:
			t.flushSurrogate()
			continue // read c again, without the pending half
		case c == '"':
			t.pos++
			if t.textIn >= 0 {
				t.tok = t.cut(in[t.textIn : t.pos-1])
				t.textIn = -1
			} else {
				t.tok = t.text
			}
			t.valueDone()
			if t.isKey {
				t.state = stColon
				return Key
			}
			return String
		case c < 0x20:
			return t.fail(codeControl)
		default: // c >= 0x80: the lead byte of a UTF-8 sequence
			t.seqStart = t.Offset()
			switch {
			case 0xC2 <= c && c <= 0xDF:
				t.u8need, t.u8lo, t.u8hi = 1, 0x80, 0xBF
			case c == 0xE0:
				t.u8need, t.u8lo, t.u8hi = 2, 0xA0, 0xBF
			case c == 0xED:
				t.u8need, t.u8lo, t.u8hi = 2, 0x80, 0x9F
			case 0xE1 <= c && c <= 0xEF:
				t.u8need, t.u8lo, t.u8hi = 2, 0x80, 0xBF
			case c == 0xF0:
				t.u8need, t.u8lo, t.u8hi = 3, 0x90, 0xBF
			case 0xF1 <= c && c <= 0xF3:
				t.u8need, t.u8lo, t.u8hi = 3, 0x80, 0xBF
			case c == 0xF4:
				t.u8need, t.u8lo, t.u8hi = 3, 0x80, 0x8F
			default:
				return t.fail(codeUTF8)
			}
			t.addByte(c)
		}
		t.pos++
	}
	if t.eof {
		return t.failAt(t.start, codeUnterminated)
	}
	return None
}

// escape reads c, a byte of an escape; it returns the error of an invalid one.
func (t *Tokenizer) escape(c byte) errCode {
	if n := int(t.esc); n < len(t.escBuf) {
		t.escBuf[n] = c
	}
	if t.esc == 1 {
		if c == 'u' {
			t.esc, t.hex = 2, 0
			return 0
		}
		t.esc = 0
		var r rune
		switch c {
		case '"', '\\', '/':
			r = rune(c)
		case 'b':
			r = '\b'
		case 'f':
			r = '\f'
		case 'n':
			r = '\n'
		case 'r':
			r = '\r'
		case 't':
			r = '\t'
		default:
			if c <= ' ' || c >= 0x7f {
				return codeEscapeControl
			}
			return codeEscapeUnknown
		}
		t.flushSurrogate()
		t.appendRune(r)
		return 0
	}
	var d byte
	switch {
	case digit(c):
		d = c - '0'
	case 'a' <= c && c <= 'f':
		d = c - 'a' + 10
	case 'A' <= c && c <= 'F':
		d = c - 'A' + 10
	default:
		return codeEscapeHex
	}
	t.hex = t.hex<<4 | rune(d)
	if t.esc++; t.esc < 6 {
		return 0
	}
	t.esc = 0
	r := t.hex
	if t.highSur != 0 {
		h := t.highSur
		t.highSur = 0
		if 0xDC00 <= r && r <= 0xDFFF {
			t.appendRune(0x10000 + (h-0xD800)<<10 + (r - 0xDC00))
			return 0
		}
		t.appendRune(utf8.RuneError)
	}
	switch {
	case 0xD800 <= r && r <= 0xDBFF:
		t.highSur = r
	case 0xDC00 <= r && r <= 0xDFFF:
		t.appendRune(utf8.RuneError)
	default:
		t.appendRune(r)
	}
	return 0
}

// flushSurrogate writes a pending high surrogate, which no low half followed, as U+FFFD.
func (t *Tokenizer) flushSurrogate() {
	if t.highSur != 0 {
		t.highSur = 0
		t.appendRune(utf8.RuneError)
	}
}

// toText moves the string's text so far out of the chunk, for an escape to follow.
func (t *Tokenizer) toText() {
	if t.textIn >= 0 {
		t.appendText(t.in[t.textIn:t.pos])
		t.textIn = -1
	}
	t.plain = false
}

// addByte adds a byte of a UTF-8 sequence to the string's text, when it is not in the chunk.
func (t *Tokenizer) addByte(c byte) {
	if t.textIn < 0 {
		t.appendText([]byte{c})
	}
}

func (t *Tokenizer) appendRune(r rune) {
	var b [utf8.UTFMax]byte
	t.appendText(utf8.AppendRune(b[:0], r))
}

// appendText adds p to the token's text, up to maxText bytes.
func (t *Tokenizer) appendText(p []byte) {
	if t.maxText > 0 && len(t.text)+len(p) > t.maxText {
		p = p[:max(t.maxText-len(t.text), 0)]
		t.long = true
	}
	t.text = append(t.text, p...)
}

// cut returns p, at most maxText bytes of it.
func (t *Tokenizer) cut(p []byte) []byte {
	if t.maxText > 0 && len(p) > t.maxText {
		t.long = true
		return p[:t.maxText]
	}
	return p
}

// finishText sets the token's text once it has ended before t.pos.
func (t *Tokenizer) finishText() {
	if t.textIn >= 0 {
		t.tok = t.cut(t.in[t.textIn:t.pos])
		t.textIn = -1
	} else {
		t.tok = t.text
	}
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

// plain reports whether c is a string byte with no meaning of its own: printable ASCII other than
// the quote and the backslash.
func plain(c byte) bool { return c >= 0x20 && c < 0x80 && c != '"' && c != '\\' }

// wordByte reports whether c would continue a word: a number or a literal followed by one is
// misspelt ("10ms", "nullx"), not a value followed by something else.
func wordByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || digit(c) || c == '_' || c == '.' || c == '+' || c == '-'
}
