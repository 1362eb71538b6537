package sim

import (
	"fmt"
	"math"
)

// colour returns the i-th colour of Tableau 10, which colours the algorithms (timeline chart)
// and the modes (error chart).
func colour(i int) string {
	p := [...]string{"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"}
	return p[i%len(p)]
}

// TimelineSVG draws, for trace ti, the busiest client's offered and admitted requests in the
// preceding window over time: one panel per mode, one line per algorithm, the offered traffic
// in grey and the limit as a dashed line.
func (r *Report) TimelineSVG(ti int) []byte {
	t, s := r.Traces[ti], r.Series[ti]
	const (
		cols          = 2
		pw, ph        = 500, 250 // panel
		left, right   = 60, 20
		top, bottom   = 34, 44
		headH         = 86 // title and legend
		legendPerLine = 5
	)
	rows := (len(r.Modes) + cols - 1) / cols
	W, H := cols*(left+pw+right), headH+rows*(top+ph+bottom)
	g := newSVG(W, H)
	who := "the client"
	if t.Keys > 1 {
		who = fmt.Sprintf("the busiest client (c%d)", s.Key)
	}
	g.text(12, 22, "start", 16, "bold", 0, fmt.Sprintf("Trace %s: requests of %s in the last %s, offered and admitted, by mode", t.Name, who, duration(r.Limit.Window)))
	g.text(12, 40, "start", 12, "", 0, t.About)

	// Legend: offered, limit, then the algorithms.
	lx, ly := 12.0, 62.0
	item := func(i int, label, stroke string, width float64, dash string) {
		x := lx + float64(i%legendPerLine)*190
		y := ly + float64(i/legendPerLine)*18
		g.line(x, y-4, x+26, y-4, stroke, width, dash)
		g.text(x+32, y, "start", 12, "", 0, label)
	}
	item(0, "offered", "#999999", 3, "")
	item(1, fmt.Sprintf("limit (%d per %s)", r.Limit.Units, duration(r.Limit.Window)), "#000000", 1.2, "6 4")
	for ai, a := range r.Algos {
		item(ai+2, a.Name, colour(ai), 1.6, "")
	}

	ymax := float64(r.Limit.Units)
	for _, v := range s.Offered {
		ymax = max(ymax, float64(v))
	}
	ymax = niceMax(ymax*1.05, 5)
	minutes := float64(t.End-t.Start) / float64(r.Limit.Window)
	for mi, m := range r.Modes {
		ox := float64(mi%cols*(left+pw+right) + left)
		oy := float64(headH + mi/cols*(top+ph+bottom) + top)
		px := func(at float64) float64 { return ox + at/float64(t.End-t.Start)*pw }
		py := func(v float64) float64 { return oy + ph - v/ymax*ph }
		g.text(ox, oy-10, "start", 13, "bold", 0, m.Name+": "+m.About)
		for _, v := range ticks(0, ymax, 5) {
			g.line(ox, py(v), ox+pw, py(v), "#e6e6e6", 1, "")
			g.text(ox-6, py(v)+4, "end", 11, "", 0, fmtTick(v))
		}
		for _, v := range ticks(0, minutes, 8) {
			x := ox + v/minutes*pw
			g.line(x, oy+ph, x, oy+ph+4, "#666666", 1, "")
			g.text(x, oy+ph+16, "middle", 11, "", 0, fmtTick(v))
		}
		g.frame(ox, oy, pw, ph, "#666666")
		g.text(ox+pw/2, oy+ph+34, "middle", 11, "", 0, "time, in windows of "+duration(r.Limit.Window))
		g.text(ox-44, oy+ph/2, "middle", 11, "", -90, "requests in the last "+duration(r.Limit.Window))
		series := func(counts []int64, stroke string, width float64, dash string) {
			xs, ys := make([]float64, len(counts)), make([]float64, len(counts))
			for i, c := range counts {
				xs[i], ys[i] = px(float64(int64(i+1)*s.Step)), py(float64(c))
			}
			g.polyline(xs, ys, stroke, width, dash)
		}
		series(s.Offered, "#999999", 3, "")
		g.line(ox, py(float64(r.Limit.Units)), ox+pw, py(float64(r.Limit.Units)), "#000000", 1.2, "6 4")
		for ai := range r.Algos {
			if c := s.Admitted[ai][mi]; c != nil {
				series(c, colour(ai), 1.6, "")
			}
		}
	}
	return g.bytes()
}

// ErrorSVG draws, for trace ti, each algorithm's over-admission (bars up) and under-admission
// (lighter bars down) in each mode, as a percentage of what its contract admits.
func (r *Report) ErrorSVG(ti int) []byte {
	t := r.Traces[ti]
	const (
		left, right = 70, 20
		headH       = 100
		ph          = 300
		bottom      = 40
		barW        = 22
		gap         = 26
	)
	nm := len(r.Modes)
	groupW := float64(nm*barW + gap)
	pw := groupW * float64(len(r.Algos))
	W, H := int(left+pw+right), headH+ph+bottom
	g := newSVG(W, H)
	g.text(12, 22, "start", 16, "bold", 0, fmt.Sprintf("Trace %s: error of each algorithm by mode, in %% of what its exact contract admits", t.Name))
	g.text(12, 40, "start", 12, "", 0, t.About)
	for mi, m := range r.Modes {
		x := 12 + float64(mi)*130
		g.rect(x, 52, 14, 12, colour(mi))
		g.text(x+20, 62, "start", 12, "", 0, m.Name)
	}
	g.text(12, 84, "start", 12, "", 0, "Bars up: over-admission; down (lighter): under-admission; n/a: the mode does not run the algorithm.")

	var up, down float64
	for _, x := range r.Results {
		if x.Trace == t.Name && x.Skipped == "" {
			up, down = max(up, x.OverPct()), max(down, x.UnderPct())
		}
	}
	up, down = niceMax(up*1.12, 4), niceMax(down*1.12, 4) // room for the labels
	if up/(up+down) < 0.15 {                              // keep room for the labels of small bars
		up = niceMax((up+down)*0.15, 2)
	}
	if down/(up+down) < 0.15 {
		down = niceMax((up+down)*0.15, 2)
	}
	oy := float64(headH)
	py := func(v float64) float64 { return oy + (up-v)/(up+down)*ph }
	for _, v := range append(ticks(-down, 0, 3), ticks(0, up, 4)...) {
		g.line(left, py(v), left+pw, py(v), "#e6e6e6", 1, "")
		g.text(left-6, py(v)+4, "end", 11, "", 0, fmtTick(math.Abs(v))+"%")
	}
	g.line(left, py(0), left+pw, py(0), "#333333", 1, "")
	g.frame(left, oy, pw, ph, "#666666")
	g.text(18, oy+ph/2, "middle", 11, "", -90, "% of ideal (up: over, down: under)")
	for ai, a := range r.Algos {
		gx := left + float64(ai)*groupW + gap/2
		g.text(gx+float64(nm*barW)/2, oy+ph+18, "middle", 12, "", 0, a.Name)
		if ai > 0 {
			g.line(gx-gap/2, oy, gx-gap/2, oy+ph, "#f0f0f0", 1, "")
		}
		for mi, m := range r.Modes {
			x := gx + float64(mi*barW)
			res, _ := r.Result(t.Name, a.Name, m.Name)
			if res.Skipped != "" {
				g.text(x+barW/2, py(0)-4, "start", 9, "", -90, "n/a")
				continue
			}
			o, u := res.OverPct(), res.UnderPct()
			if o > 0 {
				g.rect(x+1, py(0), barW-2, py(o)-py(0), colour(mi))
			}
			if u > 0 {
				g.rectAlpha(x+1, py(0), barW-2, py(-u)-py(0), colour(mi), 0.5)
			}
			if o >= 0.05 {
				g.text(x+barW/2, py(o)-4, "start", 9, "", -90, short(o))
			}
			if u >= 0.05 {
				g.text(x+barW/2, py(-u)+4, "end", 9, "", -90, short(u))
			}
		}
	}
	return g.bytes()
}

// short formats a percentage with two significant digits at most: "120", "12", "1.2", "0.12".
func short(p float64) string {
	switch {
	case p >= 10:
		return fmt.Sprintf("%.0f", p)
	case p >= 1:
		return fmt.Sprintf("%.1f", p)
	}
	return fmt.Sprintf("%.2f", p)
}
