package jsontok

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
