package redisstore_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/diana-gw/diana/internal/algotest"
	"github.com/diana-gw/diana/internal/redistest"
	"github.com/diana-gw/diana/shared/algos"
	"github.com/diana-gw/diana/shared/rules"
	"github.com/diana-gw/diana/store/redisstore"
)

// scriptCall is a command a Lua script runs.
var scriptCall = regexp.MustCompile(`redis\.p?call\(\s*['"]([A-Za-z]+)['"]`)

// TestDocUserScripts: every command that a Lua script of the module runs (the .lua files, and
// the Lua in Go sources) is one docs/redis.md's least-privilege user may run, and the user may
// run nothing more than these and the commands Diana sends itself.
func TestDocUserScripts(t *testing.T) {
	allowed := redistest.DocCommands(t)
	used := map[string]string{} // command → a file that runs it
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "bench", "testdata", "node_modules", "bin":
				return filepath.SkipDir // bench's scripts measure Redis, they never run against a gateway's
			}
			return nil
		}
		if !strings.HasSuffix(path, ".lua") && (!strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go")) {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range scriptCall.FindAllStringSubmatch(string(b), -1) {
			used[strings.ToLower(m[1])] = path
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(used) < 10 {
		t.Fatalf("found only %d commands in the module's scripts: %v", len(used), used)
	}
	for cmd, file := range used {
		if !slices.Contains(allowed, cmd) {
			t.Errorf("%s runs %s, which docs/redis.md's least-privilege user may not run", file, strings.ToUpper(cmd))
		}
	}
	// Sent by Diana itself: scripts (EVALSHA, EVAL when not loaded), the start check (PING), the
	// admin API (DEL, SCAN, GET), the settle record (SET), wait_replicas (WAIT).
	direct := []string{"evalsha", "eval", "ping", "del", "scan", "get", "set", "wait"}
	for _, cmd := range allowed {
		if _, ok := used[cmd]; !ok && !slices.Contains(direct, cmd) {
			t.Errorf("docs/redis.md's least-privilege user may run %s, which nothing in Diana runs", strings.ToUpper(cmd))
		}
	}
}

// TestDocUser: as docs/redis.md's least-privilege user, everything the store does works: each
// exact algorithm and the counter, alone and in a batch script, a write-back, the admin calls,
// PING, and WAIT (which has no replica here to wait for, so it fails as such, not for want of
// permission).
func TestDocUser(t *testing.T) {
	c := redistest.StartAs(t, redistest.DocUser(t))
	ctx := context.Background()
	s := redisstore.New(c, redisstore.Options{})
	if err := c.Ping(ctx).Err(); err != nil {
		t.Errorf("PING: %v", err)
	}
	limits := append(algotest.Exact(), algotest.Limit{Name: "counter", Alg: mustAlg(algos.NewCounter(algos.Second))})
	for i, l := range limits {
		if _, err := s.DecideOne(ctx, l.Name, l.Alg, algos.Request{Cost: 1, ID: int64(i + 1)}); err != nil {
			t.Errorf("%s: %v", l.Name, err)
		}
		ops := []*rules.Op{{Key: l.Name + ":a", Alg: l.Alg, Req: algos.Request{Cost: 1, ID: 100}}, {Key: l.Name + ":b", Alg: l.Alg, Req: algos.Request{Cost: 1, ID: 101}}}
		s.Decide(ctx, ops)
		if err := errors.Join(ops[0].Err, ops[1].Err); err != nil {
			t.Errorf("%s in a batch: %v", l.Name, err)
		}
		if l.Name == "concurrency" {
			continue // a lease is not written back
		}
		back := redisstore.Back{Op: &rules.Op{Key: l.Name, Alg: l.Alg, Req: algos.Request{Cost: 1}}, Marker: "m", Ago: 1000}
		s.WriteBack(ctx, []redisstore.Back{back})
		if back.Op.Err != nil {
			t.Errorf("%s written back: %v", l.Name, back.Op.Err)
		}
	}
	if _, err := s.Reset(ctx, "gcra+ban"); err != nil {
		t.Errorf("Reset: %v", err)
	}
	if _, err := s.Unban(ctx, "gcra+ban"); err != nil {
		t.Errorf("Unban: %v", err)
	}
	if _, _, err := s.Bans(ctx, "", nil, 10); err != nil {
		t.Errorf("Bans: %v", err)
	}
	w := redisstore.New(c, redisstore.Options{WaitReplicas: 1, WaitTimeout: 10 * time.Millisecond})
	if _, err := w.DecideOne(ctx, "waited", limits[0].Alg, algos.Request{Cost: 1}); !errors.Is(err, redisstore.ErrNotReplicated) {
		t.Errorf("with WaitReplicas and no replica: %v, want ErrNotReplicated", err)
	}
}
