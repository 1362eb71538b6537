package conf

import (
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"
)

// maxJSONDepth is the deepest nesting of arrays and objects ParseJSON accepts. Configs need a
// handful of levels; the limit keeps hostile input from growing the parser's stack.
const maxJSONDepth = 64

// smallObject is the number of keys up to which duplicate keys are found by a linear scan;
// larger objects use a set, so that a hostile object with many keys costs O(n), not O(n²).
const smallObject = 16

// SyntaxError reports why a document is not valid JSON and where.
type SyntaxError struct {
	Offset int    // byte offset of the error in the input
	Line   int    // 1-based line; lines end with "\n"
	Col    int    // 1-based column in characters; an invalid UTF-8 byte counts as one
	Msg    string // what is wrong, e.g. `duplicate key "rate"`
}

// Error returns "line L, column C: msg".
func (e *SyntaxError) Error() string {
	return "line " + strconv.Itoa(e.Line) + ", column " + strconv.Itoa(e.Col) + ": " + e.Msg
}

// ParseJSON parses a JSON document (RFC 8259) into a tree of Values: objects become *Object
// with their keys in document order, arrays []Value (never nil), strings string, numbers
// Number holding their exact text, and true, false and null become true, false and nil.
//
// It is strict: the input must be exactly one value surrounded only by whitespace (space, tab,
// "\r", "\n"). It rejects duplicate keys in an object, invalid UTF-8 and unescaped control
// characters in strings, trailing commas, comments, NaN and Infinity, numbers with leading
// zeros, a byte order mark, trailing data and empty input. Escaped UTF-16 surrogate pairs
// decode to their character; a lone escaped surrogate decodes to U+FFFD, as in encoding/json.
// Arrays and objects may nest at most 64 deep; parsing uses no recursion.
//
// Every error is a *SyntaxError.
func ParseJSON(data []byte) (Value, error) {
	// One copy of the document backs every string without escapes: one allocation, not one
	// per string.
	p := &jsonParser{data: data, src: string(data)}
	p.skipSpace()
	if p.pos == len(data) {
		return nil, p.errAt(p.pos, "empty document (expected a value)")
	}
	v, err := p.parse()
	if err != nil {
		return nil, err
	}
	p.skipSpace()
	if p.pos < len(data) {
		return nil, p.unexpected("only whitespace may follow the top-level value")
	}
	return v, nil
}

type jsonParser struct {
	data []byte
	src  string // data as a string
	pos  int
	buf  []byte // scratch space for strings with escapes, reused from one string to the next
}

// jsonFrame is an array or object that is open on the parser's explicit stack.
type jsonFrame struct {
	arr  []Value             // the array's elements, when the frame is an array
	obj  *Object             // the object, when the frame is an object; its last key awaits a value
	seen map[string]struct{} // obj's keys, once obj has more than smallObject of them
}

// parse parses one value at p.pos. Containers are kept on an explicit stack rather than the
// Go stack, so nesting costs heap, bounded by maxJSONDepth.
func (p *jsonParser) parse() (Value, error) {
	var stack []jsonFrame
	for {
		// A value starts here.
		p.skipSpace()
		if p.pos == len(p.data) {
			return nil, p.unexpected("expected a value")
		}
		var v Value
		var err error
		switch c := p.data[p.pos]; {
		case c == '[' || c == '{':
			if len(stack) == maxJSONDepth {
				return nil, p.errAt(p.pos, "nesting deeper than "+strconv.Itoa(maxJSONDepth))
			}
			p.pos++
			p.skipSpace()
			if c == '[' {
				if p.at(']') {
					p.pos++
					v = []Value{}
					break
				}
				stack = append(stack, jsonFrame{})
				continue
			}
			if p.at('}') {
				p.pos++
				v = &Object{}
				break
			}
			stack = append(stack, jsonFrame{obj: &Object{}})
			if err := p.key(&stack[len(stack)-1], `expected a string key or "}"`); err != nil {
				return nil, err
			}
			continue
		case c == '"':
			v, err = p.str()
		case c == '-' || isDigit(c):
			v, err = p.number()
		default:
			v, err = p.literal(len(stack) > 0 && stack[len(stack)-1].obj == nil)
		}
		if err != nil {
			return nil, err
		}

		// v is complete: add it to its container, and close every container that ends here.
		for {
			n := len(stack)
			if n == 0 {
				return v, nil
			}
			f := &stack[n-1]
			end := byte(']')
			if f.obj != nil {
				f.obj.Vals = append(f.obj.Vals, v)
				end = '}'
			} else {
				f.arr = append(f.arr, v)
			}
			p.skipSpace()
			if p.at(',') {
				p.pos++
				if f.obj != nil {
					p.skipSpace()
					if err := p.key(f, "expected a string key"); err != nil {
						return nil, err
					}
				}
				break // to the next value
			}
			if !p.at(end) {
				return nil, p.unexpected(`expected "," or "` + string(end) + `"`)
			}
			p.pos++
			if f.obj != nil {
				v = f.obj
			} else {
				v = f.arr
			}
			stack = stack[:n-1]
		}
	}
}

// key parses an object key and the colon after it, and adds the key to f.obj. expect says
// what was expected, for the error when no key is there.
func (p *jsonParser) key(f *jsonFrame, expect string) error {
	if !p.at('"') {
		if p.at('}') {
			// Only reachable after a comma: an empty object was handled by the caller.
			expect += "; trailing commas are not allowed"
		}
		return p.unexpected(expect)
	}
	off := p.pos
	k, err := p.str()
	if err != nil {
		return err
	}
	o := f.obj
	dup := false
	if f.seen != nil {
		_, dup = f.seen[k]
		f.seen[k] = struct{}{}
	} else {
		for _, old := range o.Keys {
			if old == k {
				dup = true
				break
			}
		}
		if !dup && len(o.Keys) == smallObject {
			f.seen = make(map[string]struct{}, 2*smallObject)
			for _, old := range o.Keys {
				f.seen[old] = struct{}{}
			}
			f.seen[k] = struct{}{}
		}
	}
	if dup {
		return p.errAt(off, "duplicate key "+strconv.Quote(k))
	}
	o.Keys = append(o.Keys, k)
	p.skipSpace()
	if !p.at(':') {
		return p.unexpected(`expected ":" after the key`)
	}
	p.pos++
	return nil
}

// literal parses true, false or null. inArray says whether the value is an array element,
// to explain a "]" after a trailing comma.
func (p *jsonParser) literal(inArray bool) (Value, error) {
	w := p.word(p.pos)
	switch string(w) {
	case "true":
		p.pos += 4
		return true, nil
	case "false":
		p.pos += 5
		return false, nil
	case "null":
		p.pos += 4
		return nil, nil
	}
	expect := "expected a value"
	if inArray && p.at(']') {
		// Only reachable after a comma: an empty array was handled by the caller.
		expect += "; trailing commas are not allowed"
	}
	return nil, p.unexpected(expect)
}

// number parses a number by the JSON grammar:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (p *jsonParser) number() (Value, error) {
	d := p.data
	start := p.pos
	i := start
	if d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
		if i < len(d) && isDigit(d[i]) {
			return nil, p.badNumber(start, "leading zeros are not allowed")
		}
	case i < len(d) && isDigit(d[i]):
		i = skipDigits(d, i)
	default:
		return nil, p.badNumber(start, `expected a digit after "-"`)
	}
	if i < len(d) && d[i] == '.' {
		i++
		if i == len(d) || !isDigit(d[i]) {
			return nil, p.badNumber(start, `expected a digit after "."`)
		}
		i = skipDigits(d, i)
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if i == len(d) || !isDigit(d[i]) {
			return nil, p.badNumber(start, "expected a digit in the exponent")
		}
		i = skipDigits(d, i)
	}
	if i < len(d) && isWordByte(d[i]) {
		// E.g. "0x1F", "1.2.3", "1e5f": report the whole token, not a valid prefix of it.
		return nil, p.badNumber(start, "")
	}
	p.pos = i
	return Number(d[start:i]), nil
}

func (p *jsonParser) badNumber(start int, why string) error {
	msg := "invalid number " + quoteToken(p.word(start))
	if why != "" {
		msg += " (" + why + ")"
	}
	return p.errAt(start, msg)
}

// str parses a string whose opening quote is at p.pos. A string without escapes is sliced
// from the input by one conversion; one with escapes is built in p.buf.
func (p *jsonParser) str() (string, error) {
	d := p.data
	start := p.pos
	for i := start + 1; i < len(d); {
		c := d[i]
		switch {
		case c == '"':
			p.pos = i + 1
			return p.src[start+1 : i], nil
		case c == '\\':
			return p.strEscaped(start, i)
		case c < 0x20:
			return "", p.errAt(i, controlMsg(c))
		case c < utf8.RuneSelf:
			i++
		default:
			r, size := utf8.DecodeRune(d[i:])
			if r == utf8.RuneError && size == 1 {
				return "", p.errAt(i, "invalid UTF-8 in string")
			}
			i += size
		}
	}
	return "", p.errAt(start, "unterminated string")
}

// strEscaped finishes str from the first backslash at i.
func (p *jsonParser) strEscaped(start, i int) (string, error) {
	d := p.data
	buf := append(p.buf[:0], d[start+1:i]...)
	for i < len(d) {
		c := d[i]
		switch {
		case c == '"':
			p.pos = i + 1
			p.buf = buf
			return string(buf), nil
		case c == '\\':
			if i+1 == len(d) {
				return "", p.errAt(start, "unterminated string")
			}
			switch e := d[i+1]; e {
			case '"', '\\', '/':
				buf = append(buf, e)
			case 'b':
				buf = append(buf, '\b')
			case 'f':
				buf = append(buf, '\f')
			case 'n':
				buf = append(buf, '\n')
			case 'r':
				buf = append(buf, '\r')
			case 't':
				buf = append(buf, '\t')
			case 'u':
				r, ok := hex4(d, i+2)
				if !ok {
					return "", p.errAt(i, "invalid escape "+escapeText(d, i, 6)+" in string (expected 4 hex digits)")
				}
				i += 6
				if r >= 0xD800 && r < 0xDC00 && i+1 < len(d) && d[i] == '\\' && d[i+1] == 'u' {
					if r2, ok := hex4(d, i+2); ok && r2 >= 0xDC00 && r2 < 0xE000 {
						r = 0x10000 + (r-0xD800)<<10 + (r2 - 0xDC00)
						i += 6
					}
				}
				if r >= 0xD800 && r < 0xE000 {
					r = utf8.RuneError // a lone surrogate encodes no character
				}
				buf = utf8.AppendRune(buf, r)
				continue
			default:
				if e <= ' ' || e >= 0x7f {
					return "", p.errAt(i, `invalid escape in string (a \ must be followed by one of "\/bfnrtu)`)
				}
				return "", p.errAt(i, "invalid escape "+escapeText(d, i, 2)+" in string")
			}
			i += 2
		case c < 0x20:
			return "", p.errAt(i, controlMsg(c))
		case c < utf8.RuneSelf:
			buf = append(buf, c)
			i++
		default:
			r, size := utf8.DecodeRune(d[i:])
			if r == utf8.RuneError && size == 1 {
				return "", p.errAt(i, "invalid UTF-8 in string")
			}
			buf = append(buf, d[i:i+size]...)
			i += size
		}
	}
	return "", p.errAt(start, "unterminated string")
}

// hex4 decodes the 4 hex digits at d[i:].
func hex4(d []byte, i int) (rune, bool) {
	if i+4 > len(d) {
		return 0, false
	}
	var r rune
	for _, c := range d[i : i+4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// escapeText returns up to n bytes of the escape at d[i:], cut at the first byte that is not
// printable ASCII so that the message stays readable.
func escapeText(d []byte, i, n int) string {
	j := i
	for j < len(d) && j < i+n && d[j] > ' ' && d[j] < 0x7f {
		j++
	}
	return string(d[i:j])
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

// unexpected reports the token at p.pos, which is not what expect says was expected.
func (p *jsonParser) unexpected(expect string) error {
	tok := "end of input"
	if p.pos < len(p.data) {
		tok = quoteToken(p.word(p.pos))
		if tok == "" {
			r, size := utf8.DecodeRune(p.data[p.pos:])
			if r == utf8.RuneError && size == 1 {
				const hex = "0123456789abcdef"
				c := p.data[p.pos]
				tok = "byte 0x" + string(hex[c>>4]) + string(hex[c&15]) + " (invalid UTF-8)"
			} else {
				tok = strconv.Quote(string(r))
			}
		}
		if p.data[p.pos] == '/' {
			expect += "; comments are not allowed"
		}
	}
	return p.errAt(p.pos, "unexpected "+tok+" ("+expect+")")
}

// word returns the run of letters, digits and "_.+-" at d[i:]: the token to quote in an
// error, e.g. "NaN", "tru" or "01".
func (p *jsonParser) word(i int) []byte {
	j := i
	for j < len(p.data) && isWordByte(p.data[j]) {
		j++
	}
	return p.data[i:j]
}

// quoteToken quotes w for an error message, shortened if long; it returns "" for an empty w.
func quoteToken(w []byte) string {
	const max = 32
	if len(w) == 0 {
		return ""
	}
	if len(w) > max {
		return strconv.Quote(string(w[:max]) + "...")
	}
	return strconv.Quote(string(w))
}

func (p *jsonParser) skipSpace() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

// at reports whether the byte at p.pos is c.
func (p *jsonParser) at(c byte) bool {
	return p.pos < len(p.data) && p.data[p.pos] == c
}

// errAt returns a *SyntaxError at byte offset off, with its line and column.
func (p *jsonParser) errAt(off int, msg string) error {
	line, lineStart := 1, 0
	for i, c := range p.data[:off] {
		if c == '\n' {
			line++
			lineStart = i + 1
		}
	}
	col := utf8.RuneCount(p.data[lineStart:off]) + 1
	return &SyntaxError{Offset: off, Line: line, Col: col, Msg: msg}
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func skipDigits(d []byte, i int) int {
	for i < len(d) && isDigit(d[i]) {
		i++
	}
	return i
}

func isWordByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || isDigit(c) ||
		c == '_' || c == '.' || c == '+' || c == '-'
}

// DecodeObject reads body, which must be one JSON object, with read, then refuses the fields
// read did not ask for. It returns the first error, naming its field: enough for a caller of
// an API to fix the request. fields lists the object's fields for the errors, e.g. "rule, key".
//
// Unlike ParseJSON, it reads each byte of invalid UTF-8 as U+FFFD (as AppendJSONString writes it
// and encoding/json reads it): a gateway may pass on a client's bytes as they came, and a
// hostile client must not make the call unreadable.
func DecodeObject(body []byte, fields string, read func(o *Obj)) error {
	if !utf8.Valid(body) {
		body = AppendValidUTF8(nil, body)
	}
	if t := strings.TrimSpace(string(body)); t == "" || t[0] != '{' {
		what := "nothing"
		if t != "" {
			what = t[:min(len(t), 20)]
		}
		return errors.New("the body must be a JSON object of the fields " + fields + ", got " + what)
	}
	v, err := ParseJSON(body)
	if err != nil {
		return errors.New("the body is not valid JSON: " + err.Error())
	}
	errs := &Errors{}
	o := Read(v, errs)
	read(o)
	o.Done()
	if len(errs.List) == 0 {
		return nil
	}
	e := errs.List[0]
	msg := e.Path + ": " + e.Reason
	if e.Reason == "unknown field" {
		msg += "; the fields are " + fields
	}
	return errors.New(msg)
}

// AppendValidUTF8 appends b with each byte of invalid UTF-8 replaced by U+FFFD.
func AppendValidUTF8(dst, b []byte) []byte {
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		if r == utf8.RuneError && size == 1 {
			dst = utf8.AppendRune(dst, utf8.RuneError)
		} else {
			dst = append(dst, b[:size]...)
		}
		b = b[size:]
	}
	return dst
}
