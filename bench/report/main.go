// Command report runs the benchmarks that feed docs/performance.md and writes it with its
// charts (docs/img/performance-*.svg), and the parts of README.md, docs/envoy.md, docs/api.md and
// docs/llm.md that quote it (make bench-report; run from the module's root, after bin/proxyload and
// bin/dianad are built):
//
//	report [-quick] [-docs docs] [-readme README.md] [-proxyload bin/proxyload]
//
// The benchmarks: bench/proxyload (dianad against a plain httputil.ReverseProxy), and
// BenchmarkMemory, BenchmarkRedis, BenchmarkRLS, BenchmarkMultiRule, BenchmarkRLSMulti,
// BenchmarkRLQS and BenchmarkUsageStream of ./bench, and the rlqs tests that measure the RLQS
// split's accuracy. -quick runs fewer and shorter rounds (about 4 minutes instead of about 10 on
// 2 cores).
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/diana-gw/diana/bench"
)

func main() {
	quick := flag.Bool("quick", false, "fewer and shorter runs")
	docs := flag.String("docs", "docs", "the directory of performance.md (charts in its img/)")
	readme := flag.String("readme", "README.md", "the README whose quotes of the page are rewritten")
	proxyload := flag.String("proxyload", "bin/proxyload", "bench/proxyload's binary")
	flag.Parse()
	if err := report(*quick, *docs, *readme, *proxyload); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}

// The runs of each mode: full, and quick. BenchmarkRLS's ratio to envoyproxy/ratelimit moves by
// several percent from count to count on a shared machine, as much as the margin it is judged by,
// so its median is taken over more counts.
var (
	proxyFlags  = [2][]string{{"-duration", "3s", "-rounds", "7"}, {"-duration", "2s", "-rounds", "3"}}
	memoryFlags = [2][]string{{"-benchtime", "2000000x", "-count", "5"}, {"-benchtime", "500000x", "-count", "3"}}
	redisFlags  = [2][]string{{"-benchtime", "4000x", "-count", "5"}, {"-benchtime", "1000x", "-count", "3"}}
	rlsFlags    = [2][]string{{"-benchtime", "10000x", "-count", "9"}, {"-benchtime", "4000x", "-count", "2"}}
)

func report(quick bool, docs, readme, proxyload string) error {
	m := 0
	if quick {
		m = 1
	}
	r := &results{Machine: bench.ThisMachine(), Date: time.Now().UTC().Format("2006-01-02 15:04 UTC"), Quick: quick}
	fmt.Fprintf(os.Stderr, "report: %s\n", r.Machine)

	tmp, err := os.MkdirTemp("", "bench-report-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	js := filepath.Join(tmp, "proxy.json")
	r.ProxyCmd = "make bench-proxy PROXYLOAD_FLAGS=\"" + strings.Join(proxyFlags[m], " ") + "\""
	if err := command(io.Discard, proxyload, append(proxyFlags[m], "-json", js)...); err != nil {
		return err
	}
	b, err := os.ReadFile(js)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, &r.Proxy); err != nil {
		return fmt.Errorf("%s: %w", js, err)
	}

	goBench := func(pattern string, flags []string) (string, benchRuns, error) {
		args := append([]string{"test", "-run", "'^$'", "-bench", pattern}, flags...)
		args = append(args, "./bench/")
		var out bytes.Buffer
		if err := command(&out, "go", args...); err != nil {
			return "", nil, err
		}
		return "go " + strings.Join(args, " "), parseBench(out.String()), nil
	}
	if r.MemoryCmd, r.Memory, err = goBench("'^BenchmarkMemory$'", memoryFlags[m]); err != nil {
		return err
	}
	if r.RedisCmd, r.Redis, err = goBench("'^BenchmarkRedis$'", redisFlags[m]); err != nil {
		return err
	}
	if r.RLSCmd, r.RLS, err = goBench("'^BenchmarkRLS$'", rlsFlags[m]); err != nil {
		return err
	}
	if r.MultiCmd, r.Multi, err = goBench("'^BenchmarkMultiRule$'", multiFlags[m]); err != nil {
		return err
	}
	if r.RLSMultiCmd, r.RLSMulti, err = goBench("'^BenchmarkRLSMulti$'", rlsMultiFlags[m]); err != nil {
		return err
	}
	if r.UsageCmd, r.Usage, err = goBench("'^BenchmarkUsageStream$'", usageFlags[m]); err != nil {
		return err
	}
	if r.RLQSCmd, r.RLQS, err = goBench("'^BenchmarkRLQS$'", rlqsFlags[m]); err != nil {
		return err
	}
	split := []string{"test", "-run", "'" + splitTests + "'", "-v", "-count", "1", "./rlqs/"}
	var out bytes.Buffer
	if err := command(&out, "go", split...); err != nil {
		return err
	}
	r.SplitCmd, r.Split = "go "+strings.Join(split, " "), parseSplit(out.String())

	md, charts, err := page(r)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(docs, "img"), 0o755); err != nil {
		return err
	}
	for name, svg := range charts {
		if err := os.WriteFile(filepath.Join(docs, "img", name), svg, 0o644); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(docs, "performance.md"), []byte(md), 0o644); err != nil {
		return err
	}
	quoting := append([]string{readme}, quotingDocs(docs)...)
	for _, f := range quoting {
		old, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		updated, err := requote(string(old), md)
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if err := os.WriteFile(f, []byte(updated), 0o644); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "report: wrote %s, its charts and the quotes in %s\n", filepath.Join(docs, "performance.md"), strings.Join(quoting, ", "))
	return nil
}

// quotingDocs are the pages beside performance.md that quote it, as README.md does: where the
// rate limit service and the quota service are set side by side (envoy.md, api.md), and the
// cost of reading a response's usage (llm.md).
func quotingDocs(docs string) []string {
	return []string{filepath.Join(docs, "envoy.md"), filepath.Join(docs, "api.md"), filepath.Join(docs, "llm.md")}
}

// command runs name with args, its output to out and to stderr (the progress), and wraps a
// failure with the command line. The go test pattern's quotes, there for the page's copy of the
// command, are not the shell's here: they are dropped.
func command(out io.Writer, name string, args ...string) error {
	args = append([]string(nil), args...)
	for i, a := range args {
		args[i] = strings.Trim(a, "'")
	}
	fmt.Fprintf(os.Stderr, "report: %s %s\n", name, strings.Join(args, " "))
	cmd := exec.Command(name, args...)
	cmd.Stdout = io.MultiWriter(out, os.Stderr)
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return nil
}

// quotes returns the quoted parts of a document, by name, each from its begin marker to its
// end marker inclusive, in order.
func quotes(doc string) (names []string, parts map[string]string, err error) {
	parts = map[string]string{}
	const begin = "<!-- quote docs/performance.md: "
	for rest := doc; ; {
		i := strings.Index(rest, begin)
		if i < 0 {
			return names, parts, nil
		}
		rest = rest[i:]
		name, _, _ := strings.Cut(rest[len(begin):], " -->")
		j := strings.Index(rest, quoteEnd)
		if j < 0 {
			return nil, nil, fmt.Errorf("the quote %q has no end", name)
		}
		if _, dup := parts[name]; dup {
			return nil, nil, fmt.Errorf("the quote %q appears twice", name)
		}
		names = append(names, name)
		parts[name] = rest[:j+len(quoteEnd)]
		rest = rest[j+len(quoteEnd):]
	}
}

// requote replaces each quote of the page in readme with the page's.
func requote(readme, page string) (string, error) {
	names, theirs, err := quotes(readme)
	if err != nil {
		return "", err
	}
	_, ours, err := quotes(page)
	if err != nil {
		return "", err
	}
	if len(names) == 0 {
		return "", errors.New("no quote of docs/performance.md to update")
	}
	for _, name := range names {
		q, ok := ours[name]
		if !ok {
			return "", fmt.Errorf("it quotes %q, which docs/performance.md does not have", name)
		}
		readme = strings.Replace(readme, theirs[name], q, 1)
	}
	return readme, nil
}
