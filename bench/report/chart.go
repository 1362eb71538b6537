package main

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"math"
)

// bar is one bar of a chart: a median with its smallest and largest run.
type bar struct {
	label            string
	median, min, max float64
}

// barChart draws bars horizontally on a scale from 0, each with a whisker from its smallest to
// its largest run, and a dashed line at ref (the anchor's 1, say); axis names the scale.
func barChart(title, axis string, ref float64, bars []bar) []byte {
	const (
		width, labelW, rowH, top, bottom = 640, 200, 30, 36, 40
	)
	height := top + rowH*len(bars) + bottom
	hi := ref
	for _, b := range bars {
		hi = math.Max(hi, math.Max(b.max, b.median))
	}
	hi = niceCeil(hi * 1.05)
	plotW := float64(width - labelW - 30)
	x := func(v float64) float64 { return float64(labelW) + v/hi*plotW }
	var s bytes.Buffer
	fmt.Fprintf(&s, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&s, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&s, `<text x="%d" y="20" font-size="14" font-weight="bold">%s</text>`+"\n", 10, esc(title))
	for i := 0; i <= 4; i++ { // the scale: five ticks
		v := hi * float64(i) / 4
		fmt.Fprintf(&s, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>`+"\n", x(v), top-4, x(v), height-bottom+4)
		fmt.Fprintf(&s, `<text x="%.1f" y="%d" text-anchor="middle" fill="#555">%s</text>`+"\n", x(v), height-bottom+18, fmtScale(v))
	}
	fmt.Fprintf(&s, `<text x="%.1f" y="%d" text-anchor="middle" fill="#555">%s</text>`+"\n", x(hi/2), height-6, esc(axis))
	for i, b := range bars {
		y := top + i*rowH
		fmt.Fprintf(&s, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", labelW-8, y+rowH/2+4, esc(b.label))
		fmt.Fprintf(&s, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="#4c78a8"/>`+"\n", labelW, y+6, x(b.median)-float64(labelW), rowH-12)
		if b.max > b.min {
			fmt.Fprintf(&s, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="black"/>`+"\n", x(b.min), y+rowH/2, x(b.max), y+rowH/2)
		}
		fmt.Fprintf(&s, `<text x="%.1f" y="%d" fill="#222">%.2f</text>`+"\n", x(math.Max(b.median, b.max))+4, y+rowH/2+4, b.median)
	}
	fmt.Fprintf(&s, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#d62728" stroke-dasharray="4 3"/>`+"\n", x(ref), top-4, x(ref), height-bottom+4)
	s.WriteString("</svg>\n")
	return s.Bytes()
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten, for the scale's end.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func fmtScale(v float64) string {
	if v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2g", v)
}

func esc(s string) string {
	var b bytes.Buffer
	xml.EscapeText(&b, []byte(s))
	return b.String()
}
