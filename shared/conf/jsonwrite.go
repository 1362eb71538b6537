package conf

import "unicode/utf8"

// AppendJSONString appends s as a JSON string. Invalid UTF-8 is written as U+FFFD, as
// encoding/json does: a header value may hold any byte, and the JSON must stay valid whatever
// a client sends (an unreadable callout would decide the request by the failure policy).
func AppendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20 || c == 0x7f:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		case c < utf8.RuneSelf:
			b = append(b, c)
		default:
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				b = append(b, `\ufffd`...)
			} else {
				b = append(b, s[i:i+size]...)
			}
			i += size
			continue
		}
		i++
	}
	return append(b, '"')
}
