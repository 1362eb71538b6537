package main

import (
	"regexp"
	"slices"
	"strconv"
	"testing"
)

// luaRegexp reads Lua patterns as Lua's string.match does (Kong's match, match_any and
// match_none validators run it): each case is what Lua answers.
func TestLuaRegexp(t *testing.T) {
	for _, c := range []struct {
		pattern, s string
		match      bool
	}{
		{"^%d+s$", "10s", true}, {"^%d+s$", "1.5s", false}, {"^%d+s$", "s", false},
		{"^[1-9]%d?%d?d$", "999d", true}, {"^[1-9]%d?%d?d$", "1000d", false}, {"^[1-9]%d?%d?d$", "0d", false},
		{"^/", "/x", true}, {"^/", "x/", false},
		{"%*%*/", "/a/**/b", true}, {"%*%*/", "/a/**", false},
		{"[^/%*]%*", "/a*", true}, {"[^/%*]%*", "/*", false},
		{"[;%?#\\]", "/a?b", true}, {"[;%?#\\]", `/a\b`, true}, {"[;%?#\\]", "/ab", false},
		{"^[%w!#%$%%&'%*%+%.%^_`|~%-]+$", "X-Api_Key.1", true}, {"^[%w!#%$%%&'%*%+%.%^_`|~%-]+$", "X Api", false},
		{"^%[[%x:%.]+%]$", "[::1]", true}, {"^%[[%x:%.]+%]$", "[zz]", false},
		{"a.c", "a\nc", true}, // . is any byte in Lua, newline too
		{"x", "axb", true},    // unanchored: anywhere
	} {
		re, err := luaRegexp(c.pattern)
		if err != nil {
			t.Fatalf("%q: %v", c.pattern, err)
		}
		if got := re.MatchString(c.s); got != c.match {
			t.Errorf("%q on %q: %v, Lua says %v", c.pattern, c.s, got, c.match)
		}
	}
	for _, bad := range []string{"%b()", "(a)", "a-", "[ab", "%"} {
		if _, err := luaRegexp(bad); err == nil {
			t.Errorf("%q: translated; want an error (unsupported)", bad)
		}
	}
}

// numberPatterns match exactly 1 to n.
func TestNumberPatterns(t *testing.T) {
	for _, n := range []int64{1, 9, 10, 19, 100, 521, 3650, 65535, 87600} {
		var res []*regexp.Regexp
		for _, p := range numberPatterns(n) {
			re, err := luaRegexp("^" + p + "$")
			if err != nil {
				t.Fatal(err)
			}
			res = append(res, re)
		}
		for i := int64(0); i <= n*11; i++ {
			s := strconv.FormatInt(i, 10)
			got := slices.ContainsFunc(res, func(re *regexp.Regexp) bool { return re.MatchString(s) })
			if want := i >= 1 && i <= n; got != want {
				t.Fatalf("n %d: %s matched %v, want %v (patterns %q)", n, s, got, want, numberPatterns(n))
			}
		}
		for _, s := range []string{"0" + strconv.FormatInt(n, 10), "", "1.0", "-1"} {
			if slices.ContainsFunc(res, func(re *regexp.Regexp) bool { return re.MatchString(s) }) {
				t.Fatalf("n %d: %q matched", n, s)
			}
		}
	}
}

// Every pattern of the schema translates, and the duration syntax takes exactly one number and
// one unit within the algorithms' bounds.
func TestPatterns(t *testing.T) {
	for _, f := range resolvedFields() {
		var ps []string
		if f.Match != nil {
			ps = append(ps, f.Match.Patterns...)
		}
		for _, n := range f.None {
			ps = append(ps, n.Pattern)
		}
		for _, p := range ps {
			if _, err := luaRegexp(p); err != nil {
				t.Errorf("%s: %v", f.Name, err)
			}
		}
	}
	window := field{Name: "window", Match: windowMatch}
	span := field{Name: "ban", Match: spanMatch}
	for _, c := range []struct {
		s            string
		window, span bool
	}{
		{"1s", true, true}, {"0s", false, true}, {"0m", false, true}, {"00m", false, false}, {"01s", false, false},
		{"10y", true, true}, {"11y", false, false}, {"521w", true, true}, {"522w", false, false},
		{"3650d", true, true}, {"3651d", false, false}, {"3649d", true, true}, {"999d", true, true}, {"2999d", true, true},
		{"315360000s", true, true}, {"315360001s", false, false}, {"315360000000000us", true, true},
		{"315360000000001us", false, false}, {"250ms", true, true}, {"5us", true, true},
		{"1m30s", false, false}, {"1M", false, false}, {"1.5s", false, false}, {"abc", false, false},
		{"60", false, false}, {"", false, false}, {" 1s", false, false}, {"1µs", false, false}, {"-1s", false, false},
	} {
		if got := checkString(window, c.s) == ""; got != c.window {
			t.Errorf("window %q: accepted %v, want %v", c.s, got, c.window)
		}
		if got := checkString(span, c.s) == ""; got != c.span {
			t.Errorf("span %q: accepted %v, want %v", c.s, got, c.span)
		}
	}
}
