package config

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/diana-gw/diana/internal/costtest"
	"github.com/diana-gw/diana/internal/redistest"
)

// The loader polls once an hour here, so every change below arrives through the watch: a
// message on the channel, a (re)subscription, or the loss of the subscription.
func TestLoaderRedis(t *testing.T) {
	ctx := context.Background()
	rs := redistest.Start(t)
	rc := rs.Client()
	path := filepath.Join(t.TempDir(), "diana.yaml")
	fileFrom := "file " + path
	writeFile(t, path, doc("file1"))
	remote := &Redis{Client: rc, Key: "diana:config", Channel: "diana:config:changed"}
	remFrom := "redis diana:config"
	l, r := newTestLoader(path, remote, time.Hour)

	// No key yet: the file applies, and the report tells that the remote has no document.
	if err := l.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if got := r.last(); got != (applied{"file1", fileFrom}) {
		t.Fatalf("after Load, applied %+v", got)
	}
	r.waitReport(t, 0, remFrom, func(err error) bool {
		return errors.Is(err, ErrNoConfig) && err.Error() == "redis GET diana:config: no config document"
	})
	run(t, l)

	publish := func(body string) {
		t.Helper()
		if err := rc.Set(ctx, "diana:config", body, 0).Err(); err != nil {
			t.Fatal(err)
		}
		if err := rc.Publish(ctx, "diana:config:changed", "x").Err(); err != nil {
			t.Fatal(err)
		}
	}
	// Whether the watch has subscribed yet or not, the change arrives: by the message, or by
	// the fetch that follows the subscription.
	publish(doc("redis1"))
	r.waitApply(t, "redis1", remFrom)

	// Now the subscription is up: only the message can bring this one.
	publish(doc("redis2"))
	r.waitApply(t, "redis2", remFrom)

	// Invalid: rejected, the last good remote config stays.
	mark := r.reportCount()
	publish("version: 1\nname: redis3\nname: again\n")
	r.waitReport(t, mark, remFrom, errContains(`redis diana:config: line 3: duplicate key "name" (first at line 2)`))
	settle(l)
	if got := r.last(); got != (applied{"redis2", remFrom}) {
		t.Fatalf("after an invalid document, applied %+v", got)
	}
	publish(doc("redis2"))
	r.waitReport(t, mark, remFrom, noError)

	// Redis goes away: the lost subscription triggers a check, which fails; the remote's last
	// document stays.
	mark = r.reportCount()
	rs.Stop()
	r.waitReport(t, mark, remFrom, func(err error) bool { return err != nil })
	settle(l)
	if got := r.last(); got != (applied{"redis2", remFrom}) {
		t.Fatalf("with Redis down, applied %+v", got)
	}

	// Redis comes back empty: the watch subscribes again, the key is missing, and still the
	// remote's last document stays.
	mark = r.reportCount()
	rs.Restart()
	r.waitReport(t, mark, remFrom, func(err error) bool { return errors.Is(err, ErrNoConfig) })
	settle(l)
	if got := r.last(); got != (applied{"redis2", remFrom}) {
		t.Fatalf("with the key missing, applied %+v", got)
	}
	// A new document is set: it applies.
	publish(doc("redis3"))
	r.waitApply(t, "redis3", remFrom)
	_ = fileFrom
	if n := r.overlapCount(); n != 0 {
		t.Fatalf("Apply overlapped itself %d times", n)
	}
}

func TestRedisFetch(t *testing.T) {
	ctx := context.Background()
	rs := redistest.Start(t)
	rc := rs.Client()
	rem := &Redis{Client: rc, Key: "k"}
	if _, _, err := rem.Fetch(ctx); !errors.Is(err, ErrNoConfig) {
		t.Fatalf("missing key: %v, want ErrNoConfig", err)
	}
	steps := []struct {
		value   string
		changed bool
	}{{"a: 1", true}, {"a: 1", false}, {"a: 2", true}, {"a: 1", true}}
	for i, s := range steps {
		rc.Set(ctx, "k", s.value, 0)
		data, changed, err := rem.Fetch(ctx)
		if err != nil || changed != s.changed || (changed && string(data) != s.value) {
			t.Fatalf("step %d: Fetch = %q, %v, %v; want changed %v", i, data, changed, err, s.changed)
		}
	}
	rc.Set(ctx, "k", strings.Repeat("#", MaxSize+1), 0)
	if _, _, err := rem.Fetch(ctx); err == nil || err.Error() != "redis GET k: document larger than 4194304 bytes (4 MiB)" {
		t.Fatalf("large value: %v", err)
	}
	// A value far larger than MaxSize costs no more memory than one just over it.
	rc.Set(ctx, "k", strings.Repeat("#", 64<<20), 0)
	var err error
	costtest.Check(t, "a 64 MiB value", 3*MaxSize, time.Minute, func() { _, _, err = rem.Fetch(ctx) })
	if err == nil || !strings.Contains(err.Error(), "document larger than") {
		t.Fatalf("64 MiB value: %v", err)
	}
	rc.Set(ctx, "k", "", 0)
	// An empty value is a document (which Decode refuses), not a missing key.
	if data, changed, err := rem.Fetch(ctx); err != nil || !changed || len(data) != 0 {
		t.Fatalf("empty value: %q, %v, %v; want an empty document", data, changed, err)
	}
	rc.HSet(ctx, "h", "a", "b")
	if _, _, err := (&Redis{Client: rc, Key: "h"}).Fetch(ctx); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("a hash: %v, want WRONGTYPE", err)
	}
	rs.Stop()
	if _, _, err := rem.Fetch(ctx); err == nil || errors.Is(err, ErrNoConfig) || !strings.HasPrefix(err.Error(), "redis GET k: ") {
		t.Fatalf("stopped server: %v", err)
	}
}

// Watch returns when its context ends, also while Redis is down.
func TestRedisWatchStops(t *testing.T) {
	rs := redistest.Start(t)
	rem := &Redis{Client: rs.Client(), Key: "k", Channel: "c"}
	for _, down := range []bool{false, true} {
		if down {
			rs.Stop()
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			rem.Watch(ctx, func() {})
			close(done)
		}()
		time.Sleep(50 * time.Millisecond)
		cancel()
		select {
		case <-done:
		case <-time.After(waitLimit):
			t.Fatalf("Watch did not return after its context ended (Redis down: %v)", down)
		}
	}
}
