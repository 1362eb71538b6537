package jsontok

import (
	"strconv"
	"unicode/utf8"
)

// SyntaxError says why the input is not JSON and where.
type SyntaxError struct {
	Offset int64 // the document offset of the error
	// Byte is the input's byte at Offset, when HasByte: the chunk fed held it.
	Byte    byte
	HasByte bool

	code     errCode
	cut      bool // the input ended before the value did
	maxDepth int
	text     string  // the number or literal read so far, for a message without the document
	esc      [6]byte // the escape read so far
	escLen   int
}

// errCode is the kind of an error.
type errCode uint8

const (
	codeEmpty errCode = iota + 1
	codeValue
	codeValueTrailingComma
	codeKeyOrClose
	codeKey
	codeKeyTrailingComma
	codeColon
	codeCommaOrBracket
	codeCommaOrBrace
	codeTrailing
	codeDepth
	codeNumMinus
	codeNumLeadingZero
	codeNumDot
	codeNumExponent
	codeNumWord
	codeControl
	codeUTF8
	codeEscapeUnknown
	codeEscapeControl
	codeEscapeHex
	codeUnterminated
)

// expected says what was expected where an error of this code found something else.
var expected = [...]string{
	codeValue:              "expected a value",
	codeValueTrailingComma: "expected a value; trailing commas are not allowed",
	codeKeyOrClose:         `expected a string key or "}"`,
	codeKey:                "expected a string key",
	codeKeyTrailingComma:   "expected a string key; trailing commas are not allowed",
	codeColon:              `expected ":" after the key`,
	codeCommaOrBracket:     `expected "," or "]"`,
	codeCommaOrBrace:       `expected "," or "}"`,
	codeTrailing:           "only whitespace may follow the top-level value",
}

// numReasons says what is wrong with an invalid number, by code.
var numReasons = [...]string{
	codeNumMinus:       `expected a digit after "-"`,
	codeNumLeadingZero: "leading zeros are not allowed",
	codeNumDot:         `expected a digit after "."`,
	codeNumExponent:    "expected a digit in the exponent",
	codeNumWord:        "",
}

// Truncated reports whether the document was cut short: the input ended inside its value.
func (e *SyntaxError) Truncated() bool { return e.cut }

// TooDeep reports whether the document nests deeper than the tokenizer's MaxDepth.
func (e *SyntaxError) TooDeep() bool { return e.code == codeDepth }

// Error returns "byte N: " and the message.
func (e *SyntaxError) Error() string {
	return "byte " + strconv.FormatInt(e.Offset, 10) + ": " + e.Message(nil)
}

// Message says what is wrong, quoting the input where it helps: with doc, the whole document
// when the caller holds it, the word or character at the error ("unexpected \"NaN\" (expected a
// value)"); without, what the tokenizer saw of it.
func (e *SyntaxError) Message(doc []byte) string {
	if doc != nil && e.Offset > int64(len(doc)) {
		doc = nil
	}
	off := int(e.Offset)
	switch c := e.code; {
	case c == codeEmpty:
		return "empty document (expected a value)"
	case c == codeDepth:
		return "nesting deeper than " + strconv.Itoa(e.maxDepth)
	case c >= codeNumMinus && c <= codeNumWord:
		w := quoteToken(e.text)
		if doc != nil {
			w = quoteToken(string(word(doc, off)))
		}
		msg := "invalid number " + w
		if why := numReasons[c]; why != "" {
			msg += " (" + why + ")"
		}
		return msg
	case c == codeControl:
		return controlMsg(e.Byte)
	case c == codeUTF8:
		return "invalid UTF-8 in string"
	case c == codeEscapeControl:
		return `invalid escape in string (a \ must be followed by one of "\/bfnrtu)`
	case c == codeEscapeUnknown:
		return "invalid escape " + e.escapeText(doc, 2) + " in string"
	case c == codeEscapeHex:
		return "invalid escape " + e.escapeText(doc, 6) + " in string (expected 4 hex digits)"
	case c == codeUnterminated:
		return "unterminated string"
	}
	expect := expected[e.code]
	slash := e.HasByte && e.Byte == '/'
	if doc != nil {
		slash = off < len(doc) && doc[off] == '/'
	}
	if slash {
		expect += "; comments are not allowed"
	}
	return "unexpected " + e.found(doc) + " (" + expect + ")"
}

// found names what the tokenizer found at the error.
func (e *SyntaxError) found(doc []byte) string {
	var at []byte
	switch {
	case doc != nil:
		at = doc[e.Offset:]
	case e.text != "":
		return quoteToken(e.text)
	case e.HasByte:
		at = []byte{e.Byte}
	}
	if len(at) == 0 {
		return "end of input"
	}
	if w := word(at, 0); len(w) > 0 {
		return quoteToken(string(w))
	}
	r, size := utf8.DecodeRune(at)
	if r == utf8.RuneError && size <= 1 {
		const hex = "0123456789abcdef"
		return "byte 0x" + string(hex[at[0]>>4]) + string(hex[at[0]&15]) + " (invalid UTF-8)"
	}
	return strconv.Quote(string(r))
}

// escapeText returns up to n bytes of the escape at the error, cut at the first byte that is not
// printable ASCII so that the message stays readable.
func (e *SyntaxError) escapeText(doc []byte, n int) string {
	src := e.esc[:e.escLen]
	if doc != nil {
		src = doc[e.Offset:min(int(e.Offset)+n, len(doc))]
	}
	j := 0
	for j < len(src) && j < n && src[j] > ' ' && src[j] < 0x7f {
		j++
	}
	return string(src[:j])
}

// word returns the run of bytes that wordByte accepts at d[i:]: the token to quote in a message,
// e.g. "NaN", "tru" or "01".
func word(d []byte, i int) []byte {
	j := i
	for j < len(d) && wordByte(d[j]) {
		j++
	}
	return d[i:j]
}

// quoteToken quotes w for a message, shortened if long.
func quoteToken(w string) string {
	const most = 32
	if len(w) > most {
		return strconv.Quote(w[:most] + "...")
	}
	return strconv.Quote(w)
}

// controlMsg explains an unescaped control character c in a string and how to write it.
func controlMsg(c byte) string {
	const hex = "0123456789ABCDEF"
	code := "U+00" + string(hex[c>>4]) + string(hex[c&15])
	esc := `\u00` + string(hex[c>>4]) + string(hex[c&15])
	switch c {
	case '\b':
		esc = `\b`
	case '\f':
		esc = `\f`
	case '\n':
		esc = `\n`
	case '\r':
		esc = `\r`
	case '\t':
		esc = `\t`
	}
	return "control character " + code + " in string (write it as " + esc + ")"
}
