package main

// The string fields' syntax, as Lua patterns: Kong checks them at its Admin API (match_any,
// match_none in the dump) and the decoder checks the same patterns, translated to Go regular
// expressions, so a string Kong accepts is one the plugin reads.

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/diana-gw/diana/shared/algos"
)

// matchAny is Kong's match_any: the value must match one of the patterns.
type matchAny struct {
	Patterns []string
	Err      string
}

// matchNot is one entry of Kong's match_none: the value must not match the pattern.
type matchNot struct {
	Pattern, Err string
}

// durationUnits are the units a duration field takes, in µs. A Kong duration is one whole
// number and one unit: a Lua pattern cannot repeat a group, so "1m30s" is written "90s".
var durationUnits = []struct {
	name string
	us   int64
}{{"y", 365 * 86400e6}, {"w", 7 * 86400e6}, {"d", 86400e6}, {"h", 3600e6}, {"m", 60e6}, {"s", 1e6}, {"ms", 1e3}, {"us", 1}}

// numberPatterns returns Lua patterns (unanchored) that together match the numbers 1 to n
// written without leading zeros, digit by digit as a pattern can: shorter numbers, then each
// prefix of n followed by a smaller digit and any digits, then n itself.
func numberPatterns(n int64) []string {
	d := strconv.FormatInt(n, 10)
	var ps []string
	if len(d) > 1 {
		ps = append(ps, "[1-9]"+strings.Repeat("%d?", len(d)-2))
	}
	for i := 0; i < len(d); i++ {
		lo, hi := byte('0'), d[i]-1
		if i == 0 {
			lo = '1'
		}
		if hi < lo {
			continue
		}
		digit := "[" + string(lo) + "-" + string(hi) + "]"
		if lo == hi {
			digit = string(lo)
		}
		ps = append(ps, d[:i]+digit+strings.Repeat("%d", len(d)-i-1))
	}
	return append(ps, d)
}

// durationMatch returns the patterns of a duration up to max µs, above 0 if positive: a whole
// number of one unit, up to max in that unit (10y, 521w, 3650d, 87600h, ...).
func durationMatch(positive bool, max int64) *matchAny {
	m := &matchAny{}
	var most []string
	for _, u := range durationUnits {
		n := max / u.us
		if n == 0 {
			continue
		}
		if !positive {
			m.Patterns = append(m.Patterns, "^0"+u.name+"$")
		}
		for _, p := range numberPatterns(n) {
			m.Patterns = append(m.Patterns, "^"+p+u.name+"$")
		}
		most = append(most, strconv.FormatInt(n, 10)+u.name)
	}
	what := "a duration"
	if positive {
		what = "a duration above 0"
	}
	m.Err = "must be " + what + ": a whole number and one unit, y (365d), w, d, h, m, s, ms or us, such as 30s, 1m, 1h, 1d, without leading zeros (at most " +
		strings.Join(most, ", ") + ")"
	return m
}

// windowMatch and spanMatch are the duration syntaxes of the config: a window (above 0) and a
// span that may be 0s (ban, batch_max_age), both within the algorithms' 10 years.
var (
	windowMatch = durationMatch(true, algos.MaxSpan)
	spanMatch   = durationMatch(false, algos.MaxSpan)
)

// portPatterns are the ports 1 to 65535.
var portPatterns = numberPatterns(65535)

const (
	hostPattern = "[%w][%w%.%-_]*" // a host name or IPv4 address
	ipv6Pattern = "%[[%x:%.]+%]"   // an IPv6 address, in brackets
)

// hostMatch is a Redis host (redis_host): a name, an IPv4 address or a bracketed IPv6 one.
var hostMatch = &matchAny{
	Patterns: []string{"^" + hostPattern + "$", "^" + ipv6Pattern + "$", "^[%x]*:[%x]*:[%x:%.]*$"},
	Err:      "must be a host name, an IPv4 address or an IPv6 address, such as redis.internal, 10.0.0.5 or ::1",
}

// addrMatch is a Redis address (redis_addrs): a host with an optional port (6379 if none).
var addrMatch = func() *matchAny {
	m := &matchAny{Err: "must be host:port (a host name, an IPv4 address or a bracketed IPv6 address, and a port from 1 to 65535), or a host alone for port 6379, such as redis-1:6379 or [::1]:6380"}
	for _, h := range []string{hostPattern, ipv6Pattern} {
		m.Patterns = append(m.Patterns, "^"+h+"$")
		for _, p := range portPatterns {
			m.Patterns = append(m.Patterns, "^"+h+":"+p+"$")
		}
	}
	return m
}()

// headerMatch is an HTTP header name (a token of RFC 9110).
var headerMatch = &matchAny{Patterns: []string{"^[%w!#%$%%&'%*%+%.%^_`|~%-]+$"}, Err: "must be an HTTP header name, such as X-Api-Key"}

// usageNone refuses the sums of header names usage_header cannot read: a + that joins no two
// names, more than usage.MaxTerms names. A name given twice, which a Lua pattern cannot see, is
// adapted with a warning (see settings.add).
var usageNone = []matchNot{
	{"^%+", "cannot start with +: + joins two header names"},
	{"%+$", "cannot end with +: + joins two header names"},
	{"%+%+", "cannot hold ++: + joins two header names"},
	{"%+.*%+.*%+.*%+.*%+.*%+.*%+.*%+", "may add up at most 8 headers"},
}

// pathMatch and pathNone are a path pattern: /login exactly, * one whole segment, a final **
// any rest; matched against the normal form of request paths, which has no ;parameters, query
// or backslash.
var (
	pathMatch = &matchAny{Patterns: []string{"^/"}, Err: "must start with /, such as /login or /api/**"}
	pathNone  = []matchNot{
		{"[;%?#\\]", "cannot hold ;, ?, # or a backslash: requests are matched by their normal path, which has none"},
		{"%*%*/", "** may only end the pattern, as in /api/**"},
		{"%*%*%*", "* must be a whole segment, ** the whole last one, as in /users/*/orders or /api/**"},
		{"[^/%*]%*", "* must be a whole segment, as in /users/*/orders"},
		{"%*[^/%*]", "* must be a whole segment, as in /users/*/orders"},
	}
)

// luaClasses are the Lua character classes the patterns use, as Go character-class contents.
var luaClasses = map[byte]string{'d': `0-9`, 'a': `A-Za-z`, 'w': `0-9A-Za-z`, 'x': `0-9A-Fa-f`, 's': `\t\n\v\f\r `,
	'l': `a-z`, 'u': `A-Z`, 'p': `!-/:-@\[-` + "`" + `{-~`}

// luaRegexp translates a Lua pattern (string.match, as Kong's validators run it) into a Go
// regular expression. It takes the subset the schema uses: anchors, ., %-classes and escapes,
// [sets] with ranges, and the quantifiers ?, * and +. Lua patterns work on bytes; the patterns
// here are ASCII, and a value with other bytes matches them in both or neither.
func luaRegexp(p string) (*regexp.Regexp, error) {
	var b strings.Builder
	inSet := false
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '%':
			i++
			if i == len(p) {
				return nil, errPattern(p, "ends with %")
			}
			e := p[i]
			if cl, ok := luaClasses[e]; ok {
				if inSet {
					b.WriteString(cl)
				} else {
					b.WriteString("[" + cl + "]")
				}
			} else if e >= '0' && e <= '9' || e >= 'A' && e <= 'Z' || e >= 'a' && e <= 'z' || e > '~' || e < '!' {
				return nil, errPattern(p, "unsupported %"+string(e))
			} else {
				b.WriteString(`\` + string(e)) // RE2 takes any escaped punctuation as itself, in a set too
			}
		case inSet:
			switch c {
			case ']':
				inSet = false
				b.WriteByte(']')
			case '\\', '[':
				b.WriteString(`\` + string(c))
			default:
				b.WriteByte(c)
			}
		case c == '[':
			inSet = true
			b.WriteByte('[')
			if i+1 < len(p) && p[i+1] == '^' {
				b.WriteByte('^')
				i++
			}
		case c == '^' && i == 0, c == '$' && i == len(p)-1:
			b.WriteByte(c)
		case c == '.':
			b.WriteString(`(?s:.)`)
		case c == '?' || c == '*' || c == '+':
			b.WriteByte(c)
		case c == '-' || c == '(' || c == ')':
			return nil, errPattern(p, "unsupported "+string(c))
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	if inSet {
		return nil, errPattern(p, "unclosed [")
	}
	return regexp.Compile(b.String())
}

type patternError string

func (e patternError) Error() string { return string(e) }

func errPattern(p, why string) error {
	return patternError("Lua pattern " + strconv.Quote(p) + ": " + why)
}
