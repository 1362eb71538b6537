package lograte

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/diana-gw/diana/internal/logbuf"
)

// Of a burst from many goroutines one event passes; a second later the next passes and
// carries the count of the others.
func TestLimiter(t *testing.T) {
	t.Parallel()
	var l limiter
	var wg sync.WaitGroup
	var mu sync.Mutex
	passed := 0
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if ok, _ := l.allow(); ok {
				mu.Lock()
				passed++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if passed != 1 {
		t.Fatalf("%d of a burst of 100 passed, want 1", passed)
	}
	time.Sleep(time.Second)
	if ok, skipped := l.allow(); !ok || skipped != 99 {
		t.Fatalf("a second later: %v, %d held back; want true, 99", ok, skipped)
	}
}

func newLogger() (*slog.Logger, *logbuf.Buffer) {
	var b logbuf.Buffer
	return slog.New(New(slog.NewTextHandler(&b, nil))), &b
}

// A burst of records of two kinds from many goroutines lets one of each through, with its
// attributes; a second later the next of a kind carries the count of its kind held back, the
// loggers With makes counting with the one they came from.
func TestHandler(t *testing.T) {
	t.Parallel()
	log, out := newLogger()
	other := log.With("listener", "proxy")
	var wg sync.WaitGroup
	for i := range 100 {
		wg.Add(2)
		go func() { defer wg.Done(); log.Warn("upstream failed", "upstream", "api", "try", i) }()
		go func() { defer wg.Done(); other.Info("connection limit reached", "max", 10) }()
	}
	wg.Wait()
	got := out.String()
	if strings.Count(got, "\n") != 2 || !strings.Contains(got, `level=WARN msg="upstream failed" upstream=api try=`) ||
		!strings.Contains(got, `level=INFO msg="connection limit reached" listener=proxy max=10 suppressed=0`) {
		t.Fatalf("a burst of 100 of each kind logged:\n%s\nwant one line of each, the first with suppressed=0", got)
	}
	time.Sleep(time.Second)
	log.Info("connection limit reached", "max", 10)
	if got := out.String(); !strings.HasSuffix(got, `msg="connection limit reached" max=10 suppressed=99`+"\n") {
		t.Fatalf("a second later:\n%s\nwant the next line of the kind with suppressed=99", got)
	}
}

// An event Due declines counts as held back; once Due, the record passes with the count.
func TestDue(t *testing.T) {
	t.Parallel()
	log, out := newLogger()
	if !Due(log, slog.LevelInfo, "request denied") {
		t.Fatal("Due false for a kind never logged")
	}
	log.Info("request denied", "rule", "a")
	for range 3 {
		if Due(log, slog.LevelInfo, "request denied") {
			t.Fatal("Due true within a second of a line of the kind")
		}
	}
	log.Info("request denied", "rule", "b") // held back by the handler itself
	time.Sleep(time.Second)
	if !Due(log, slog.LevelInfo, "request denied") {
		t.Fatal("Due false a second later")
	}
	log.Info("request denied", "rule", "c")
	if got := out.String(); strings.Count(got, "\n") != 2 || !strings.HasSuffix(got, "rule=c suppressed=4\n") {
		t.Fatalf("logged:\n%s\nwant rule=a, then rule=c with suppressed=4", got)
	}
	if Due(log, slog.LevelDebug, "request denied") || Due(slog.New(slog.DiscardHandler), slog.LevelInfo, "request denied") {
		t.Error("Due true for a level not logged")
	}
	if !Due(slog.Default(), slog.LevelInfo, "request denied") {
		t.Error("Due false on a logger without a Handler")
	}
}

// Messages beyond maxKinds share one kind.
func TestMaxKinds(t *testing.T) {
	t.Parallel()
	log, out := newLogger()
	for i := range maxKinds + 5 {
		log.Warn(fmt.Sprint("event ", i))
	}
	if n := strings.Count(out.String(), "\n"); n != maxKinds+1 {
		t.Errorf("%d lines for %d messages, want %d", n, maxKinds+5, maxKinds+1)
	}
}

// A record held back allocates nothing when written with LogAttrs and up to five typed
// attributes, nor does an event Due declines: the request paths log so.
func TestHeldBackAllocs(t *testing.T) {
	log, _ := newLogger()
	ctx, err, rule, client := context.Background(), errors.New("timeout"), "per-ip", "192.0.2.1"
	line := func() {
		log.LogAttrs(ctx, slog.LevelWarn, "rate-limit backend failed", slog.String("rule", rule),
			slog.String("client", client), slog.Int64("limit", 1<<40), slog.Any("err", err), slog.String("on_error", "open"))
	}
	line()
	if n := testing.AllocsPerRun(100, line); n != 0 {
		t.Errorf("a record held back: %v allocations, want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() { Due(log, slog.LevelWarn, "rate-limit backend failed") }); n != 0 {
		t.Errorf("Due declining: %v allocations, want 0", n)
	}
}
