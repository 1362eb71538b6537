package sim

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"math"
	"strconv"
)

// svg writes an SVG document: a few shapes, enough for line and bar charts. Every text is
// escaped; numbers are written with at most one decimal.
type svg struct {
	b bytes.Buffer
}

func newSVG(w, h int) *svg {
	s := &svg{}
	fmt.Fprintf(&s.b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(&s.b, `<rect x="0" y="0" width="%d" height="%d" fill="white"/>`+"\n", w, h)
	return s
}

// bytes closes the document and returns it.
func (s *svg) bytes() []byte {
	s.b.WriteString("</svg>\n")
	return s.b.Bytes()
}

func num(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		v = 0
	}
	return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64)
}

// line draws a segment; dash is a stroke-dasharray ("" for a solid line).
func (s *svg) line(x1, y1, x2, y2 float64, stroke string, width float64, dash string) {
	fmt.Fprintf(&s.b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="%s"%s/>`+"\n",
		num(x1), num(y1), num(x2), num(y2), attr(stroke), num(width), dashAttr(dash))
}

// polyline draws a line through the points xs[i], ys[i].
func (s *svg) polyline(xs, ys []float64, stroke string, width float64, dash string) {
	s.b.WriteString(`<polyline fill="none" points="`)
	for i := range xs {
		if i > 0 {
			s.b.WriteByte(' ')
		}
		s.b.WriteString(num(xs[i]) + "," + num(ys[i]))
	}
	fmt.Fprintf(&s.b, `" stroke="%s" stroke-width="%s" stroke-linejoin="round"%s/>`+"\n", attr(stroke), num(width), dashAttr(dash))
}

// rect draws a filled rectangle; a negative height or width is drawn from the other side.
func (s *svg) rect(x, y, w, h float64, fill string) { s.rectAlpha(x, y, w, h, fill, 1) }

// rectAlpha draws a rectangle filled with fill at opacity alpha (0 to 1).
func (s *svg) rectAlpha(x, y, w, h float64, fill string, alpha float64) {
	if w < 0 {
		x, w = x+w, -w
	}
	if h < 0 {
		y, h = y+h, -h
	}
	opacity := ""
	if alpha < 1 {
		opacity = ` fill-opacity="` + strconv.FormatFloat(alpha, 'f', 2, 64) + `"`
	}
	fmt.Fprintf(&s.b, `<rect x="%s" y="%s" width="%s" height="%s" fill="%s"%s/>`+"\n", num(x), num(y), num(w), num(h), attr(fill), opacity)
}

// frame draws an unfilled rectangle.
func (s *svg) frame(x, y, w, h float64, stroke string) {
	fmt.Fprintf(&s.b, `<rect x="%s" y="%s" width="%s" height="%s" fill="none" stroke="%s"/>`+"\n", num(x), num(y), num(w), num(h), attr(stroke))
}

// text writes str at (x, y); anchor is start, middle or end; rotate turns it (degrees) about
// (x, y).
func (s *svg) text(x, y float64, anchor string, size float64, weight string, rotate float64, str string) {
	fmt.Fprintf(&s.b, `<text x="%s" y="%s" text-anchor="%s" font-size="%s"`, num(x), num(y), attr(anchor), num(size))
	if weight != "" {
		fmt.Fprintf(&s.b, ` font-weight="%s"`, attr(weight))
	}
	if rotate != 0 {
		fmt.Fprintf(&s.b, ` transform="rotate(%s %s %s)"`, num(rotate), num(x), num(y))
	}
	s.b.WriteString(">")
	xml.EscapeText(&s.b, []byte(str))
	s.b.WriteString("</text>\n")
}

func dashAttr(dash string) string {
	if dash == "" {
		return ""
	}
	return ` stroke-dasharray="` + attr(dash) + `"`
}

// attr escapes v for an attribute value.
func attr(v string) string {
	var b bytes.Buffer
	xml.EscapeText(&b, []byte(v))
	return b.String()
}

// step returns a round step (1, 2 or 5 × 10^k) that cuts [lo, hi] into about n parts.
func step(lo, hi float64, n int) float64 {
	if hi <= lo {
		hi = lo + 1
	}
	raw := (hi - lo) / float64(max(n, 1))
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, f := range []float64{1, 2, 5} {
		if f*mag >= raw {
			return f * mag
		}
	}
	return 10 * mag
}

// ticks returns the multiples of step(lo, hi, n) in [lo, hi].
func ticks(lo, hi float64, n int) []float64 {
	st := step(lo, hi, n)
	var ts []float64
	for i := math.Ceil(lo/st - 1e-9); i*st <= hi+st*1e-9; i++ {
		ts = append(ts, i*st)
	}
	return ts
}

// niceMax rounds v > 0 up to a multiple of step(0, v, n), so that the top of an axis has a
// tick; 1 if v ≤ 0.
func niceMax(v float64, n int) float64 {
	if v <= 0 {
		return 1
	}
	st := step(0, v, n)
	return math.Ceil(v/st-1e-9) * st
}

// fmtTick formats a tick value without trailing zeros.
func fmtTick(v float64) string {
	if v == 0 {
		v = 0 // not "-0"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}
