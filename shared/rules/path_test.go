package rules

import (
	"strings"
	"testing"
)

func TestNormalPath(t *testing.T) {
	for _, c := range []struct{ in, decode, keep string }{
		// The spellings typical upstreams route to /api/login.
		{"/api/login", "/api/login", "/api/login"},
		{"/api//login", "/api/login", "/api/login"},
		{"//api/login", "/api/login", "/api/login"},
		{"/x/../api/login", "/api/login", "/api/login"},
		{"/api/./login", "/api/login", "/api/login"},
		{"/api/%2e%2e/api/login", "/api/login", "/api/login"},
		{"/api/%2E/login", "/api/login", "/api/login"},
		{"/api/.%2e/api/login", "/api/login", "/api/login"},
		{"/api/log%69n", "/api/login", "/api/login"},
		{"/%61pi/login", "/api/login", "/api/login"},
		{"/api/login/", "/api/login", "/api/login"},
		{"/api/login?x=1", "/api/login", "/api/login"},
		{"/api/login#frag", "/api/login", "/api/login"},
		{"/api/login;jsessionid=1", "/api/login", "/api/login"},
		{"/api;v=1/login", "/api/login", "/api/login"},
		{"/public/..;/api/login", "/api/login", "/api/login"},
		{"api/login", "/api/login", "/api/login"},
		{"http://example.com/api/login", "/api/login", "/api/login"},
		{"HTTPS://example.com:8443/api//login?q", "/api/login", "/api/login"},
		{"/../../api/login", "/api/login", "/api/login"}, // never above the root
		// Encoded slashes and backslashes: the option.
		{"/api%2Flogin", "/api/login", "/api%2Flogin"},
		{"/api%2flogin", "/api/login", "/api%2Flogin"},
		{"/api%5Clogin", "/api/login", "/api%5Clogin"},
		{`/api\login`, "/api/login", "/api%5Clogin"},
		{"/x%2F..%2Fapi/login", "/api/login", "/x%2F..%2Fapi/login"},
		// Not the same path.
		{"/API/login", "/API/login", "/API/login"},
		{"/api/login%3Bx", "/api/login%3Bx", "/api/login%3Bx"},
		{"/api/login%252e", "/api/login%252e", "/api/login%252e"}, // decoded once: %25, then "2e"
		{"/api/%C0%AE%C0%AE/login", "/api/%C0%AE%C0%AE/login", "/api/%C0%AE%C0%AE/login"},
		// One spelling each for what a path may not hold raw.
		{"/a b", "/a%20b", "/a%20b"},
		{"/a%20b", "/a%20b", "/a%20b"},
		{"/a%2", "/a%252", "/a%252"},
		{"/a%zz", "/a%25zz", "/a%25zz"},
		{"/é", "/%C3%A9", "/%C3%A9"},
		{"/a:b@c!$&'()*+,=", "/a:b@c!$&'()*+,=", "/a:b@c!$&'()*+,="},
		// Edges.
		{"", "/", "/"},
		{"/", "/", "/"},
		{"//", "/", "/"},
		{"/.", "/", "/"},
		{"/..", "/", "/"},
		{"?x", "/", "/"},
		{"*", "/*", "/*"},
	} {
		for _, m := range []struct {
			s    EscapedSlashes
			want string
		}{{DecodeSlashes, c.decode}, {KeepSlashes, c.keep}} {
			got, ok := NormalPath(c.in, m.s)
			if !ok || got != m.want {
				t.Errorf("NormalPath(%q, %s) = %q, %v; want %q", c.in, EscapedSlashesNames[m.s], got, ok, m.want)
			}
			if again, _ := NormalPath(got, m.s); again != got {
				t.Errorf("NormalPath(%q, %s) = %q, then %q: not idempotent", c.in, EscapedSlashesNames[m.s], got, again)
			}
		}
	}
	for _, in := range []string{"/api%2Flogin", "/api%5clogin", `/api\login`, "/a/b%2f"} {
		if _, ok := NormalPath(in, RejectSlashes); ok {
			t.Errorf("NormalPath(%q, reject) accepted", in)
		}
	}
	if _, ok := NormalPath("/api/login;x%2F", RejectSlashes); !ok {
		t.Error("a slash inside dropped ;parameters was refused")
	}

	// Control characters, raw or escaped, anywhere in the path (;parameters too) refuse the
	// request, whatever the options; in the query they do not count.
	for _, in := range []string{"/a%00b", "/a\x00b", "/api/login%00", "/api/login%09", "/api/login\t", "/a%0a", "/a%0D%0A",
		"/a%1f", "/a%7F", "/a\x7f", "/a;x=%00/b", "%00", "http://h/a%00"} {
		for _, s := range []EscapedSlashes{DecodeSlashes, KeepSlashes, RejectSlashes} {
			for _, strip := range []bool{false, true} {
				if p, ok := (PathForm{Slashes: s, StripDotsSpaces: strip}).Normal(in); ok {
					t.Errorf("NormalPath(%q, %s, strip %v) = %q, accepted", in, EscapedSlashesNames[s], strip, p)
				}
			}
		}
	}
	for _, in := range []string{"/a?x=%00", "/a#%09", "/a%2500", "/a%20b", "/a%80"} {
		if _, ok := NormalPath(in, DecodeSlashes); !ok {
			t.Errorf("NormalPath(%q) refused: no control character in the path", in)
		}
	}
}

// Trailing dots and spaces are kept by default, stripped with StripDotsSpaces.
func TestNormalPathStripDotsSpaces(t *testing.T) {
	for _, c := range []struct{ in, keep, strip string }{
		{"/api/login.", "/api/login.", "/api/login"},
		{"/api/login%2e", "/api/login.", "/api/login"},
		{"/api/login%2E%2e", "/api/login..", "/api/login"},
		{"/api/login%20", "/api/login%20", "/api/login"},
		{"/api/login ", "/api/login%20", "/api/login"},
		{"/api/login. %20.", "/api/login.%20%20.", "/api/login"},
		{"/api./login.", "/api./login.", "/api/login"},
		{"/api/login.json", "/api/login.json", "/api/login.json"},
		{"/api/.hidden", "/api/.hidden", "/api/.hidden"},
		{"/api/ x", "/api/%20x", "/api/%20x"},
		{"/a/./b/../c", "/a/c", "/a/c"},    // dot segments stay dot segments
		{"/a/.../b", "/a/.../b", "/a/b"},   // a segment of dots alone is stripped to nothing
		{"/a/%20/b", "/a/%20/b", "/a/b"},   // and of spaces alone
		{"/a/b/..%2e", "/a/b/...", "/a/b"}, // "..." is not ".."
		{"/api/login.;x=1", "/api/login.", "/api/login"},
		{"/api/login./", "/api/login.", "/api/login"},
	} {
		for _, m := range []struct {
			strip bool
			want  string
		}{{false, c.keep}, {true, c.strip}} {
			f := PathForm{StripDotsSpaces: m.strip}
			got, ok := f.Normal(c.in)
			if !ok || got != m.want {
				t.Errorf("Normal(%q, strip %v) = %q, %v; want %q", c.in, m.strip, got, ok, m.want)
			}
			if again, _ := f.Normal(got); again != got {
				t.Errorf("Normal(%q, strip %v) = %q, then %q: not idempotent", c.in, m.strip, got, again)
			}
		}
	}
}

func TestNormalPathAllocs(t *testing.T) {
	for _, p := range []string{"/", "/api/login", "/users/42/orders", "/a:b@c"} {
		if a := testing.AllocsPerRun(100, func() { NormalPath(p, DecodeSlashes) }); a != 0 {
			t.Errorf("NormalPath(%q): %v allocations, want 0 for a normal path", p, a)
		}
	}
	long := "/" + strings.Repeat("a/", 100_000) + ".."
	if got, _ := NormalPath(long, DecodeSlashes); len(got) != len(long)-5 {
		t.Errorf("a long path: %d bytes out of %d", len(got), len(long))
	}
}

// FuzzNormalPath: whatever the input, the normal form starts with '/', is normal (a second pass
// changes nothing), and every spelling of it that an upstream reads alike — doubled slashes, "."
// and "x/.." segments, unreserved characters escaped (in either case of hex), a final slash,
// ;parameters, a query — has the same normal form. spell drives the choice of spellings.
func FuzzNormalPath(f *testing.F) {
	for _, seed := range []struct{ path, spell string }{
		{"/api/login", "\x01\x02\x03\x04\x05\x06\x07"},
		{"/users/42/orders", "abcdefgh"},
		{"//a/../b/%2e/c%2F?x#y", "\xff\x00\xff"},
		{`/a\b;c=d/%zz/%C3%A9/é`, "spell"},
		{"http://h/x", ""},
		{"", "\x09"},
		{"/" + strings.Repeat("../", 50) + "x", "\x10\x20\x30"},
	} {
		f.Add(seed.path, seed.spell)
	}
	f.Fuzz(func(t *testing.T, raw, spell string) {
		for _, form := range []PathForm{{Slashes: DecodeSlashes}, {Slashes: KeepSlashes}, {Slashes: DecodeSlashes, StripDotsSpaces: true}} {
			mode := EscapedSlashesNames[form.Slashes]
			p, ok := form.Normal(raw)
			if !ok { // only a control character refuses a path here: raw holds one, or an escape of one
				if !hasControl(raw) {
					t.Fatalf("NormalPath(%q, %+v) refused a path without a control character", raw, form)
				}
				continue
			}
			if !strings.HasPrefix(p, "/") || hasControl(p) {
				t.Fatalf("NormalPath(%q, %s) = %q: not a path, or holds a control character", raw, mode, p)
			}
			if again, _ := form.Normal(p); again != p {
				t.Fatalf("NormalPath(%q, %+v) = %q, then %q: not idempotent", raw, form, p, again)
			}
			if v := respell(p, spell); !strings.Contains(p, "%2F") && !strings.Contains(p, "%5C") {
				if got, _ := form.Normal(v); got != p {
					t.Fatalf("%q is a spelling of %q, but its normal form is %q (%+v)", v, p, got, form)
				}
			}
		}
		if p, ok := NormalPath(raw, RejectSlashes); ok {
			if d, _ := NormalPath(raw, DecodeSlashes); d != p {
				t.Fatalf("NormalPath(%q): %q when refusing escaped slashes, %q when decoding them", raw, p, d)
			}
		}
	})
}

// hasControl reports whether s holds a control character, raw or as an escape (%00–%1F, %7F).
func hasControl(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '%' && i+2 < len(s) && hexVal(s[i+1]) >= 0 && hexVal(s[i+2]) >= 0 {
			c = byte(hexVal(s[i+1])<<4 | hexVal(s[i+2]))
		}
		if c < ' ' || c == 0x7f {
			return true
		}
	}
	return false
}

// respell writes the normal path p another way an upstream reads alike, each choice taken from
// the next byte of spell.
func respell(p, spell string) string {
	next := func() byte {
		if spell == "" {
			return 0
		}
		b := spell[0]
		spell = spell[1:]
		return b
	}
	var b strings.Builder
	for _, seg := range strings.Split(p[1:], "/") {
		switch next() % 4 {
		case 1:
			b.WriteString("//")
		case 2:
			b.WriteString("/./")
		case 3:
			b.WriteString("/zz/../")
		default:
			b.WriteByte('/')
		}
		for i := 0; i < len(seg); i++ {
			c := seg[i]
			k := next() % 3
			switch {
			case c == '%' && i+2 < len(seg): // a kept escape, whole, its hex in either case
				esc := seg[i : i+3]
				if k == 2 {
					esc = strings.ToLower(esc)
				}
				b.WriteString(esc)
				i += 2
			case unreserved(c) && k == 1:
				b.WriteString("%" + string(hexDigit[c>>4]) + string(hexDigit[c&15]))
			case unreserved(c) && k == 2:
				b.WriteString(strings.ToLower("%" + string(hexDigit[c>>4]) + string(hexDigit[c&15])))
			default:
				b.WriteByte(c)
			}
		}
		if next()%5 == 1 {
			b.WriteString(";jsessionid=x")
		}
	}
	if next()%3 == 1 {
		b.WriteByte('/')
	}
	if next()%3 == 1 {
		b.WriteString("?q=1#f")
	}
	return b.String()
}
