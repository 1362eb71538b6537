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

// TimelineSVG draws, for trace ti, the busiest client's requests in the preceding window over
// time as small multiples: one panel per algorithm (rows) and mode (columns), each with only
// the offered traffic (grey), what the contract admits (black, dashed), what the nodes admitted
// (the mode's colour) and the limit (dotted), so that no line hides another's.
func (r *Report) TimelineSVG(ti int) []byte {
	t, s := r.Traces[ti], r.Series[ti]
	const (
		pw, ph      = 190, 84 // panel
		gapX, gapY  = 14, 14
		left, right = 140, 16
		top, bottom = 112, 46
	)
	nm, na := len(r.Modes), len(r.Algos)
	W, H := left+nm*(pw+gapX)-gapX+right, top+na*(ph+gapY)-gapY+bottom
	g := newSVG(W, H)
	who := "the client"
	if t.Keys > 1 {
		who = fmt.Sprintf("the busiest client (c%d)", s.Key)
	}
	g.text(12, 22, "start", 16, "bold", 0, fmt.Sprintf("Trace %s: requests of %s in the last %s, by algorithm (rows) and mode (columns)", t.Name, who, duration(r.Limit.Window)))
	g.text(12, 40, "start", 12, "", 0, t.About)

	legend := []struct {
		label, stroke string
		width         float64
		dash          string
	}{
		{"offered", "#bbbbbb", 3, ""},
		{"contract (ideal)", "#000000", 1.4, "5 3"},
		{"admitted (colour of the mode)", colour(0), 1.8, ""},
		{fmt.Sprintf("limit (%d per %s)", r.Limit.Units, duration(r.Limit.Window)), "#777777", 1, "1 3"},
	}
	for i, l := range legend {
		x := 12 + float64(i)*230
		g.line(x, 58, x+26, 58, l.stroke, l.width, l.dash)
		g.text(x+32, 62, "start", 12, "", 0, l.label)
	}
	note := fmt.Sprintf("x: time, 0 to %s; y: requests in the last %s, the same scale in every panel. Where admitted follows the dashed contract, the mode is exact.",
		duration(t.End-t.Start), duration(r.Limit.Window))
	for _, m := range r.Modes {
		if m.Outage != nil {
			note += " Shaded: Redis unreachable."
			break
		}
	}
	g.text(12, 80, "start", 11, "", 0, note)

	ymax := float64(r.Limit.Units)
	for _, v := range s.Offered {
		ymax = max(ymax, float64(v))
	}
	ymax = niceMax(ymax*1.05, 3)
	for mi, m := range r.Modes {
		x := float64(left + mi*(pw+gapX))
		g.text(x+pw/2, top-8, "middle", 12, "bold", 0, m.Name)
	}
	for ai, a := range r.Algos {
		oy := float64(top + ai*(ph+gapY))
		g.text(10, oy+ph/2+4, "start", 12, "bold", 0, a.Name)
		for mi := range r.Modes {
			ox := float64(left + mi*(pw+gapX))
			px := func(i int) float64 { return ox + float64(int64(i+1)*s.Step)/float64(t.End-t.Start)*pw }
			py := func(v float64) float64 { return oy + ph - v/ymax*ph }
			if mi == 0 {
				for _, v := range ticks(0, ymax, 2) {
					g.text(ox-4, py(v)+4, "end", 10, "", 0, fmtTick(v))
				}
			}
			for _, o := range r.Modes[mi].outages(t) { // shade the outages
				from, to := float64(o[0]-t.Start)/float64(t.End-t.Start), float64(o[1]-t.Start)/float64(t.End-t.Start)
				g.rectAlpha(ox+from*pw, oy, (to-from)*pw, ph, "#f2c4c4", 0.8)
			}
			g.frame(ox, oy, pw, ph, "#999999")
			counts := s.Admitted[ai][mi]
			if counts == nil {
				g.text(ox+pw/2, oy+ph/2+4, "middle", 11, "", 0, "n/a")
				continue
			}
			series := func(c []int64, stroke string, width float64, dash string) {
				xs, ys := make([]float64, len(c)), make([]float64, len(c))
				for i, v := range c {
					xs[i], ys[i] = px(i), py(float64(v))
				}
				g.polyline(xs, ys, stroke, width, dash)
			}
			series(s.Offered, "#bbbbbb", 3, "")
			g.line(ox, py(float64(r.Limit.Units)), ox+pw, py(float64(r.Limit.Units)), "#777777", 1, "1 3")
			series(counts, colour(mi), 1.8, "")
			series(s.Ideal[ai], "#000000", 1.4, "5 3")
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
