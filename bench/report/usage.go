package main

import (
	"fmt"
	"strconv"
	"strings"
)

// usageFlags are BenchmarkUsageStream's runs: full, and quick. Each run of a 1 MiB stream takes a
// few ms, so the section adds seconds to the report, not minutes.
var usageFlags = [2][]string{{"-benchtime", "300x", "-count", "5"}, {"-benchtime", "100x", "-count", "3"}}

// usageCases are BenchmarkUsageStream's limits as the page names them; the first is the anchor.
var usageCases = []peer{{"plain", "plain: a static cost"}, {"usage", "usage: a field path of the stream (body)"},
	{"openai", "format openai: Chat chunks"}, {"openai-responses", "format openai-responses: Responses events"},
	{"anthropic", "format anthropic: Messages events"}, {"gemini", "format gemini: running totals in every chunk"},
	{"ollama", "format ollama: JSON lines"}}

// usageSection writes what reading a token usage from a streamed response costs per request
// (BenchmarkUsageStream). docs/llm.md quotes its table.
func usageSection(b *strings.Builder, r *results) error {
	b.WriteString("## Token usage read from a streamed response\n\n")
	b.WriteString(`The net/http middleware (dianad's proxy reads a response the same way) in front of a handler
streaming a 1 MiB response written 32 KiB at a time as the reverse proxy copies them, under a
per-key token budget whose cost is read from the stream: a field path of OpenAI-shaped chunks
("usage"), and each provider's stream in its format (` + "`format: auto`" + `, by the request's path: the
usage where the provider puts it, running totals in every Gemini chunk); beside the same
middleware and OpenAI stream under a per-key limit of a static cost ("plain"). The writer keeps
nothing, so the figures are the process's own work per request, without the network. The cases
take turns, one per -count. Medians [min–max].

`)
	type fig struct{ ns, mbs, bytes, allocs float64 }
	figs := make([]fig, len(usageCases))
	var t strings.Builder
	fmt.Fprintf(&t, "Measured by `%s`:\n\n", r.UsageCmd)
	t.WriteString("| limit | time per request | throughput | memory per request | allocations per request |\n| --- | ---: | ---: | ---: | ---: |\n")
	for i, c := range usageCases {
		name := "BenchmarkUsageStream/" + c.key
		var v [4]float64
		for j, unit := range []string{"ns/op", "MB/s", "B/op", "allocs/op"} {
			s, ok := r.Usage.get(name, unit)
			if !ok {
				return fmt.Errorf("%s: no %s", name, unit)
			}
			v[j] = s.Median
			if j == 0 {
				fmt.Fprintf(&t, "| %s | %s [%s–%s]", c.name, duration(s.Median), duration(s.Min), duration(s.Max))
			}
		}
		figs[i] = fig{v[0], v[1], v[2], v[3]}
		fmt.Fprintf(&t, " | %s MB/s | %s B | %s |\n", num(v[1]), num(v[2]), strconv.FormatFloat(v[3], 'f', -1, 64))
	}
	p, u := figs[0], figs[1]
	lo, hi := figs[2], figs[2]
	for _, f := range figs[2:] {
		if f.ns < lo.ns {
			lo = f
		}
		if f.ns > hi.ns {
			hi = f
		}
	}
	fmt.Fprintf(&t, "\nReading the usage of a 1 MiB stream costs %s per request more than the static cost (the medians' difference), %s bytes and %s allocations more: the body is not kept. In a provider's format, %s to %s more.\n",
		duration(u.ns-p.ns), num(u.bytes-p.bytes), strconv.FormatFloat(u.allocs-p.allocs, 'f', -1, 64), duration(lo.ns-p.ns), duration(hi.ns-p.ns))
	b.WriteString(quote("usage", t.String()))
	b.WriteString("\n")
	return nil
}

// duration writes a time in ns with the unit that keeps it short.
func duration(ns float64) string {
	switch {
	case ns >= 1e6:
		return num(ns/1e6) + " ms"
	case ns >= 1e3:
		return num(ns/1e3) + " µs"
	default:
		return num(ns) + " ns"
	}
}
