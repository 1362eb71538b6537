package main

import (
	"encoding/xml"
	"os"
	"strings"
	"testing"

	"github.com/diana-gw/diana/bench"
)

// README.md's performance figures, and those of the docs that quote it (quotingDocs), are quotes
// of docs/performance.md, which make bench-report writes: each quote must be the page's, word for word, so that neither drifts.
func TestREADMEQuotesPage(t *testing.T) {
	page, err := os.ReadFile("../../docs/performance.md")
	if err != nil {
		t.Fatal(err)
	}
	_, ours, err := quotes(string(page))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range append([]string{"../../README.md"}, quotingDocs("../../docs")...) {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		names, theirs, err := quotes(string(b))
		if err != nil {
			t.Fatal(err)
		}
		if len(names) == 0 {
			t.Fatalf("%s quotes nothing of docs/performance.md", doc)
		}
		for _, name := range names {
			if theirs[name] != ours[name] {
				t.Errorf("%s's quote %q differs from docs/performance.md's (run make bench-report, or copy the page's):\n%s:\n%s\npage:\n%s", doc, name, doc, theirs[name], ours[name])
			}
		}
	}
}

// go test -bench output: result lines by name without the GOMAXPROCS suffix, units gathered
// over -count; other lines ignored.
func TestParseBench(t *testing.T) {
	out := `goos: linux
goarch: amd64
pkg: github.com/diana-gw/diana/bench
cpu: AMD EPYC
BenchmarkMemory/serial-2         	 3000000	       126.0 ns/op	      1.17 x:sethvargo	       0 allocs/op:diana
BenchmarkMemory/serial-2         	 3000000	       130.0 ns/op	      1.11 x:sethvargo	       0 allocs/op:diana
BenchmarkRLS/clients-16-2        	   20000	         0 ns/op	      4053 diana-req/s
--- FAIL: BenchmarkOther
PASS
ok  	github.com/diana-gw/diana/bench	12.3s
`
	r := parseBench(out)
	if got := r["BenchmarkMemory/serial"]["x:sethvargo"]; len(got) != 2 || got[0] != 1.17 || got[1] != 1.11 {
		t.Errorf("x:sethvargo: %v", got)
	}
	if s, ok := r.get("BenchmarkMemory/serial", "ns/op"); !ok || s != (bench.Spread{Median: 128, Min: 126, Max: 130}) {
		t.Errorf("ns/op: %+v %v", s, ok)
	}
	if s, ok := r.get("BenchmarkRLS/clients-16", "diana-req/s"); !ok || s.Median != 4053 {
		t.Errorf("BenchmarkRLS/clients-16: %+v %v", s, ok)
	}
	if _, ok := r.get("BenchmarkOther", "ns/op"); ok || len(r) != 2 {
		t.Errorf("parsed %v, want the two benchmarks only", r)
	}
}

func TestRequote(t *testing.T) {
	page := "# P\n\n" + quote("a", "| x | 1.00 |") + "\ntext\n" + quote("b", "B new")
	readme := "intro\n" + quote("b", "B old") + "middle\n" + quote("a", "A old") + "end\n"
	got, err := requote(readme, page)
	if err != nil {
		t.Fatal(err)
	}
	if want := "intro\n" + quote("b", "B new") + "middle\n" + quote("a", "| x | 1.00 |") + "end\n"; got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	for _, tc := range []struct{ readme, wantErr string }{
		{"no quote", "no quote"},
		{quote("c", "C"), `"c"`},
		{quoteBegin("a") + "\nunterminated", "no end"},
		{quote("a", "1") + quote("a", "2"), "twice"},
	} {
		if _, err := requote(tc.readme, page); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%q: error %v, want one with %q", tc.readme, err, tc.wantErr)
		}
	}
}

func TestNum(t *testing.T) {
	for v, want := range map[float64]string{0: "0.00", 1.234: "1.23", 12.34: "12.3", 126.4: "126", 9184.4: "9,184", 1234567: "1,234,567", -2500: "-2,500"} {
		if got := num(v); got != want {
			t.Errorf("num(%v) = %q, want %q", v, got, want)
		}
	}
}

// The chart is well-formed XML, with a bar and a label per entry, labels escaped.
func TestBarChart(t *testing.T) {
	svg := barChart("t <1>", "axis", 1, []bar{{"a & b", 1.2, 1.1, 1.3}, {"c", 0.5, 0.5, 0.5}})
	d := xml.NewDecoder(strings.NewReader(string(svg)))
	rects, texts := 0, []string{}
	for {
		tok, err := d.Token()
		if err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("not XML: %v\n%s", err, svg)
			}
			break
		}
		switch e := tok.(type) {
		case xml.StartElement:
			if e.Name.Local == "rect" {
				rects++
			}
		case xml.CharData:
			texts = append(texts, string(e))
		}
	}
	if rects != 3 { // the background and two bars
		t.Errorf("%d rects, want 3", rects)
	}
	all := strings.Join(texts, "|")
	for _, want := range []string{"t <1>", "a & b", "1.20", "0.50"} {
		if !strings.Contains(all, want) {
			t.Errorf("the chart lacks %q: %s", want, all)
		}
	}
}
