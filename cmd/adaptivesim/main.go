// Command adaptivesim writes the adaptive-limit study (sim/adaptive.go): docs/adaptive.md and its
// charts in docs/img, from deterministic runs in virtual time.
//
//	go run ./cmd/adaptivesim -out docs
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/diana-gw/diana/sim"
)

func main() {
	out := flag.String("out", "docs", "the directory of adaptive.md (charts in its img/)")
	flag.Parse()
	s := sim.RunAdaptiveStudy(8)
	files := map[string][]byte{
		"adaptive.md":            []byte(s.Markdown()),
		"img/adaptive-limit.svg": s.LimitSVG(),
		"img/adaptive-p99.svg":   s.P99SVG(),
	}
	for name, b := range files {
		p := filepath.Join(*out, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	fmt.Print(s.Markdown())
}
