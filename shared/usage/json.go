package usage

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// scanner is a push-down JSON scanner (RFC 8259, strict: no comments, no trailing commas, valid
// UTF-8 in strings) fed one byte at a time, which finds the values of a Fields' paths as it goes
// and keeps nothing of the document but its open containers.
//
// Paths are matched with bit masks, one bit per term: each open object holds the terms whose
// path its own path begins, a key being read narrows them byte by byte, and a value whose key
// ends a term's path is that term's leaf, read as a number (anything else at a leaf is an error).
type scanner struct {
	f        *Fields
	maxDepth int
	stack    []frame
	state    uint8
	off      int64 // bytes consumed, for error messages

	// The value about to start or being read: the terms it is the leaf of, and the terms
	// whose paths continue inside it when it is an object.
	leaf, child uint8

	// The key being read: the terms it still matches and its decoded length so far.
	keyMask uint8
	keyPos  int

	// The string being read.
	isKey   bool
	esc     uint8 // 0 none; 1 after '\'; 2..5 reading the hex digits of \u
	hex     rune
	highSur rune  // a \u high surrogate awaiting its low half
	u8need  uint8 // continuation bytes still due
	u8lo    byte  // the range of the next continuation byte
	u8hi    byte

	num    number
	lit    string // the literal being read (true, false, null) and how far
	litPos int

	found uint8
	vals  [MaxTerms]int64
	err   error

	// Text mode (Fields.Text): a leaf is a string, whose decoded bytes are captured, at most
	// maxText of them.
	text      bool
	capturing bool
	captured  []byte
	over      bool // the string was longer than maxText
}

// maxText bounds a string Fields.Text captures.
const maxText = 256

type frame struct {
	obj  bool
	mask uint8 // terms whose path continues in this object (0 for an array)
	seen uint8 // terms whose key this object has had: a second is ErrDuplicate
}

const (
	stValue        = iota // a value must start
	stKeyOrClose          // after '{'
	stKey                 // after ',' in an object
	stColon               // after a key
	stValueOrClose        // after '['
	stAfter               // after a value: ',' or the container's close
	stString
	stNumber
	stLiteral
	stEnd // after the top-level value: whitespace only
)

// reset prepares s for a new document.
func (s *scanner) reset(f *Fields, maxDepth int) {
	*s = scanner{f: f, maxDepth: maxDepth, stack: s.stack[:0], child: all(f)}
}

func all(f *Fields) uint8 { return uint8(1<<len(f.terms) - 1) }

// started reports whether s has seen anything but whitespace.
func (s *scanner) started() bool { return s.state != stValue || len(s.stack) > 0 }

func (s *scanner) fail(cls error, msg string) {
	if s.err == nil {
		s.err = wrap(cls, "byte "+strconv.FormatInt(s.off, 10)+": "+msg)
	}
}

func space(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// skipping reports whether s is inside a string whose bytes it need not look at one by one:
// no escape, UTF-8 sequence or surrogate pending, and not a key a path may match. Such a string's
// plain bytes (see plain) change nothing but the offset.
func (s *scanner) skipping() bool {
	return s.state == stString && s.err == nil && s.esc == 0 && s.u8need == 0 && s.highSur == 0 && (!s.isKey || s.keyMask == 0) && !s.capturing
}

// plain reports whether c is a string byte with no meaning of its own: printable ASCII other
// than the quote and the backslash (and so neither a line end of a stream).
func plain(c byte) bool { return c >= 0x20 && c < 0x80 && c != '"' && c != '\\' }

// step takes one byte.
func (s *scanner) step(c byte) {
	switch s.state {
	case stString:
		s.stringByte(c)
		return
	case stNumber:
		if s.num.add(c) {
			return
		}
		s.endNumber()
		if s.err != nil {
			return
		}
		// c follows the number: read it after the value
	case stLiteral:
		if c != s.lit[s.litPos] {
			s.fail(ErrSyntax, "invalid literal (expected "+s.lit+")")
			return
		}
		if s.litPos++; s.litPos == len(s.lit) {
			s.valueDone()
		}
		return
	}
	if space(c) {
		return
	}
	switch s.state {
	case stValue:
		s.startValue(c)
	case stValueOrClose:
		if c == ']' {
			s.close()
		} else {
			s.startValue(c)
		}
	case stKeyOrClose, stKey:
		switch {
		case c == '"':
			top := s.stack[len(s.stack)-1]
			s.state, s.isKey, s.keyMask, s.keyPos = stString, true, top.mask, 0
		case c == '}' && s.state == stKeyOrClose:
			s.close()
		default:
			s.fail(ErrSyntax, "expected a key")
		}
	case stColon:
		if c != ':' {
			s.fail(ErrSyntax, "expected ':' after a key")
			return
		}
		s.state = stValue
	case stAfter:
		top := s.stack[len(s.stack)-1]
		switch {
		case c == ',' && top.obj:
			s.state = stKey
		case c == ',':
			s.state, s.leaf, s.child = stValue, 0, 0
		case c == '}' && top.obj, c == ']' && !top.obj:
			s.close()
		default:
			s.fail(ErrSyntax, "expected ',' or the end of the "+kind(top.obj))
		}
	case stEnd:
		s.fail(ErrSyntax, "data after the JSON value")
	}
}

// valueKind names the value a byte starts, for an error at a leaf; "" for no value.
func valueKind(c byte) string {
	switch c {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't':
		return "true"
	case 'f':
		return "false"
	case 'n':
		return "null"
	}
	return ""
}

func kind(obj bool) string {
	if obj {
		return "object"
	}
	return "array"
}

// startValue starts the value whose first byte is c; s.leaf and s.child say where it is.
func (s *scanner) startValue(c byte) {
	if s.leaf != 0 && s.text {
		if c != '"' {
			s.fail(ErrValue, s.leafName()+": "+valueKind(c)+", not a string")
			return
		}
		s.state, s.isKey, s.capturing, s.captured, s.over = stString, false, true, s.captured[:0], false
		return
	}
	if s.leaf != 0 && c != '-' && (c < '0' || c > '9') {
		what := valueKind(c)
		if what == "" {
			s.fail(ErrSyntax, "expected a value")
			return
		}
		s.fail(ErrValue, s.leafName()+": "+what+", not a number")
		return
	}
	switch c {
	case '{', '[':
		if len(s.stack) >= s.maxDepth {
			s.fail(ErrDepth, "more than "+strconv.Itoa(s.maxDepth)+" nested objects and arrays")
			return
		}
		f := frame{obj: c == '{'}
		if f.obj {
			f.mask = s.child
			s.state = stKeyOrClose
		} else {
			s.state, s.leaf, s.child = stValueOrClose, 0, 0
		}
		s.stack = append(s.stack, f)
	case '"':
		s.state, s.isKey = stString, false
	case 't':
		s.state, s.lit, s.litPos = stLiteral, "true", 1
	case 'f':
		s.state, s.lit, s.litPos = stLiteral, "false", 1
	case 'n':
		s.state, s.lit, s.litPos = stLiteral, "null", 1
	default:
		s.num = number{}
		if !s.num.add(c) {
			s.fail(ErrSyntax, "expected a value")
			return
		}
		s.state = stNumber
	}
}

// close ends the innermost container.
func (s *scanner) close() {
	s.stack = s.stack[:len(s.stack)-1]
	s.valueDone()
}

// valueDone moves past a finished value.
func (s *scanner) valueDone() {
	s.leaf, s.child = 0, 0
	if len(s.stack) == 0 {
		s.state = stEnd
	} else {
		s.state = stAfter
	}
}

// endNumber ends the number being read: a leaf's value is recorded.
func (s *scanner) endNumber() {
	if !s.num.complete() {
		s.fail(ErrSyntax, "invalid number")
		return
	}
	if s.leaf != 0 {
		v, err := s.num.value("")
		if err != nil {
			s.fail(ErrValue, s.leafName()+": "+err.(*usageError).msg)
			return
		}
		if s.found&s.leaf != 0 {
			s.fail(ErrDuplicate, s.leafName()+": found twice")
			return
		}
		for t := range s.f.terms {
			if s.leaf&(1<<t) != 0 {
				s.vals[t] = v
			}
		}
		s.found |= s.leaf
	}
	s.valueDone()
}

// leafName names the path of the current leaf.
func (s *scanner) leafName() string {
	for t, segs := range s.f.terms {
		if s.leaf&(1<<t) != 0 {
			return joinPath(segs)
		}
	}
	return "?"
}

func joinPath(segs []string) string {
	n := ""
	for i, k := range segs {
		if i > 0 {
			n += "."
		}
		n += k
	}
	return n
}

// stringByte takes a byte inside a string.
func (s *scanner) stringByte(c byte) {
	switch {
	case s.u8need > 0:
		if c < s.u8lo || c > s.u8hi {
			s.fail(ErrSyntax, "invalid UTF-8 in a string")
			return
		}
		s.u8need--
		s.u8lo, s.u8hi = 0x80, 0xBF
		s.keyByte(c)
	case s.esc == 1:
		if c == 'u' {
			s.esc, s.hex = 2, 0
			return
		}
		i := strings.IndexByte(`"\/bfnrt`, c)
		if i < 0 {
			s.fail(ErrSyntax, "invalid escape in a string")
			return
		}
		s.esc = 0
		s.keyRune(rune("\"\\/\b\f\n\r\t"[i]))
	case s.esc >= 2:
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		default:
			s.fail(ErrSyntax, "invalid \\u escape in a string")
			return
		}
		s.hex = s.hex<<4 | rune(d)
		if s.esc++; s.esc == 6 {
			s.esc = 0
			s.escapedRune(s.hex)
		}
	case c == '"':
		s.keyRune(-1)
		s.endString()
	case c == '\\':
		s.esc = 1
	case c < 0x20:
		s.fail(ErrSyntax, "control character in a string")
	case c < 0x80:
		s.keyRune(rune(c))
	default:
		s.keyRune(-1) // flush a pending high surrogate
		switch {
		case 0xC2 <= c && c <= 0xDF:
			s.u8need, s.u8lo, s.u8hi = 1, 0x80, 0xBF
		case c == 0xE0:
			s.u8need, s.u8lo, s.u8hi = 2, 0xA0, 0xBF
		case c == 0xED:
			s.u8need, s.u8lo, s.u8hi = 2, 0x80, 0x9F
		case 0xE1 <= c && c <= 0xEF:
			s.u8need, s.u8lo, s.u8hi = 2, 0x80, 0xBF
		case c == 0xF0:
			s.u8need, s.u8lo, s.u8hi = 3, 0x90, 0xBF
		case 0xF1 <= c && c <= 0xF3:
			s.u8need, s.u8lo, s.u8hi = 3, 0x80, 0xBF
		case c == 0xF4:
			s.u8need, s.u8lo, s.u8hi = 3, 0x80, 0x8F
		default:
			s.fail(ErrSyntax, "invalid UTF-8 in a string")
			return
		}
		s.keyByte(c)
	}
}

// escapedRune takes a rune written as \uXXXX, pairing UTF-16 surrogates; a lone surrogate is
// U+FFFD, as in encoding/json.
func (s *scanner) escapedRune(r rune) {
	if s.highSur != 0 {
		h := s.highSur
		s.highSur = 0
		if 0xDC00 <= r && r <= 0xDFFF {
			s.keyRune(0x10000 + (h-0xD800)<<10 + (r - 0xDC00))
			return
		}
		s.keyRune(utf8.RuneError)
	}
	switch {
	case 0xD800 <= r && r <= 0xDBFF:
		s.highSur = r
	case 0xDC00 <= r && r <= 0xDFFF:
		s.keyRune(utf8.RuneError)
	default:
		s.keyRune(r)
	}
}

// keyRune adds a decoded rune to the key being read; -1 only flushes a pending high surrogate.
func (s *scanner) keyRune(r rune) {
	if s.highSur != 0 {
		s.highSur = 0
		s.keyRune(utf8.RuneError)
	}
	if r < 0 || !s.capturing && (!s.isKey || s.keyMask == 0) {
		return
	}
	if r < utf8.RuneSelf {
		s.keyByte(byte(r))
		return
	}
	var b [utf8.UTFMax]byte
	for _, c := range utf8.AppendRune(b[:0], r) {
		s.keyByte(c)
	}
}

// keyByte narrows the key's matching terms by its next decoded byte.
func (s *scanner) keyByte(c byte) {
	if s.capturing {
		if len(s.captured) < maxText {
			s.captured = append(s.captured, c)
		} else {
			s.over = true
		}
		return
	}
	if !s.isKey || s.keyMask == 0 {
		return
	}
	d := len(s.stack) - 1
	for t, segs := range s.f.terms {
		if s.keyMask&(1<<t) != 0 && (s.keyPos >= len(segs[d]) || segs[d][s.keyPos] != c) {
			s.keyMask &^= 1 << t
		}
	}
	s.keyPos++
}

// endString ends a string: a key sets where the value after it is.
func (s *scanner) endString() {
	if s.capturing {
		s.capturing = false
		if s.found&s.leaf != 0 {
			s.fail(ErrDuplicate, s.leafName()+": found twice")
			return
		}
		s.found |= s.leaf
	}
	if !s.isKey {
		s.valueDone()
		return
	}
	d := len(s.stack) - 1
	s.leaf, s.child = 0, 0
	for t, segs := range s.f.terms {
		if s.keyMask&(1<<t) == 0 || len(segs[d]) != s.keyPos {
			continue
		}
		if len(segs) == d+1 {
			s.leaf |= 1 << t
		} else {
			s.child |= 1 << t
		}
	}
	top := &s.stack[d]
	if k := s.leaf | s.child; top.seen&k != 0 {
		s.leaf = k
		s.fail(ErrDuplicate, "a key on the path "+s.leafName()+" appears twice in one object")
		return
	}
	top.seen |= s.leaf | s.child
	s.state = stColon
}

// finish ends the document: an error, or nil with s.found the terms read.
func (s *scanner) finish() error {
	if s.err == nil && s.state == stNumber {
		s.endNumber()
	}
	if s.err == nil && s.state != stEnd {
		s.fail(ErrTruncated, "the body ends inside its JSON value")
	}
	return s.err
}
