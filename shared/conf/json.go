package conf

import (
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/diana-gw/diana/shared/jsontok"
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
// It reads the document with shared/jsontok, so it is as strict: the input must be exactly one
// value surrounded only by whitespace (space, tab, "\r", "\n"); invalid UTF-8 and unescaped
// control characters in strings, trailing commas, comments, NaN and Infinity, numbers with
// leading zeros, a byte order mark, trailing data and empty input are refused; escaped UTF-16
// surrogate pairs decode to their character, a lone escaped surrogate to U+FFFD, as in
// encoding/json. Besides, it rejects duplicate keys in an object. Arrays and objects may nest at
// most 64 deep; parsing uses no recursion.
//
// Every error is a *SyntaxError.
func ParseJSON(data []byte) (Value, error) {
	var t jsontok.Tokenizer
	t.Reset(maxJSONDepth, 0)
	t.Feed(data)
	t.End()
	// One copy of the document backs every string without escapes and every number: one
	// allocation, not one per string.
	b := treeBuilder{src: string(data)}
	for {
		switch k := t.Next(); k {
		case jsontok.None:
			return b.root, nil
		case jsontok.Error:
			e := t.Err()
			return nil, syntaxError(data, int(e.Offset), e.Message(data))
		case jsontok.Key:
			if err := b.key(&t); err != nil {
				return nil, syntaxError(data, int(t.Start()), err.Error())
			}
		default:
			b.token(k, &t)
		}
	}
}

// treeBuilder builds ParseJSON's tree from the tokens of one document.
type treeBuilder struct {
	src   string
	stack []jsonFrame
	root  Value
}

// jsonFrame is an array or object under construction.
type jsonFrame struct {
	arr  []Value             // the array's elements, when the frame is an array
	obj  *Object             // the object, when the frame is an object; its last key awaits a value
	seen map[string]struct{} // obj's keys, once obj has more than smallObject of them
}

// token adds the value a token starts, ends or is.
func (b *treeBuilder) token(k jsontok.Kind, t *jsontok.Tokenizer) {
	var v Value
	switch k {
	case jsontok.BeginObject:
		b.stack = append(b.stack, jsonFrame{obj: &Object{}})
		return
	case jsontok.BeginArray:
		b.stack = append(b.stack, jsonFrame{arr: []Value{}})
		return
	case jsontok.EndObject, jsontok.EndArray:
		f := b.stack[len(b.stack)-1]
		b.stack = b.stack[:len(b.stack)-1]
		if v = f.arr; f.obj != nil {
			v = f.obj
		}
	case jsontok.String:
		v = b.text(t)
	case jsontok.Number:
		v = Number(b.src[t.Start():t.Offset()])
	case jsontok.True:
		v = true
	case jsontok.False:
		v = false
	}
	if len(b.stack) == 0 {
		b.root = v
		return
	}
	if f := &b.stack[len(b.stack)-1]; f.obj != nil {
		f.obj.Vals = append(f.obj.Vals, v)
	} else {
		f.arr = append(f.arr, v)
	}
}

// text returns the string t read: a slice of the document's copy when it has no escapes.
func (b *treeBuilder) text(t *jsontok.Tokenizer) string {
	if t.Plain() {
		return b.src[t.Start()+1 : t.Offset()-1]
	}
	return string(t.Text())
}

// key adds an object's key, refusing one the object has already.
func (b *treeBuilder) key(t *jsontok.Tokenizer) error {
	k := b.text(t)
	f := &b.stack[len(b.stack)-1]
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
		return errors.New("duplicate key " + strconv.Quote(k))
	}
	o.Keys = append(o.Keys, k)
	return nil
}

// syntaxError returns a *SyntaxError at byte offset off of data, with its line and column.
func syntaxError(data []byte, off int, msg string) error {
	line, lineStart := 1, 0
	for i, c := range data[:off] {
		if c == '\n' {
			line++
			lineStart = i + 1
		}
	}
	col := utf8.RuneCount(data[lineStart:off]) + 1
	return &SyntaxError{Offset: off, Line: line, Col: col, Msg: msg}
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
