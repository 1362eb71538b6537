package jsontok

import "unicode/utf8"

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
			if t.u8need, t.u8lo, t.u8hi = utf8Lead(c); t.u8need == 0 {
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

// utf8Lead returns how many continuation bytes the lead byte c of a UTF-8 sequence needs and the
// range of the first (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF); 0 for
// a byte that leads none.
func utf8Lead(c byte) (need, lo, hi byte) {
	switch {
	case 0xC2 <= c && c <= 0xDF:
		return 1, 0x80, 0xBF
	case c == 0xE0:
		return 2, 0xA0, 0xBF
	case c == 0xED:
		return 2, 0x80, 0x9F
	case 0xE1 <= c && c <= 0xEF:
		return 2, 0x80, 0xBF
	case c == 0xF0:
		return 3, 0x90, 0xBF
	case 0xF1 <= c && c <= 0xF3:
		return 3, 0x80, 0xBF
	case c == 0xF4:
		return 3, 0x80, 0x8F
	}
	return 0, 0, 0
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

// plain reports whether c is a string byte with no meaning of its own: printable ASCII other than
// the quote and the backslash.
func plain(c byte) bool { return c >= 0x20 && c < 0x80 && c != '"' && c != '\\' }
