package config

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/diana-gw/diana/shared/conf"
)

// testCfg is the parsed form of the tiny documents of these tests: {version: 1, name: x}.
type testCfg struct{ Name string }

// parseTest accepts exactly {version: 1, name: <non-empty string>}.
func parseTest(doc conf.Value, name string) (testCfg, error) {
	o, ok := doc.(*conf.Object)
	if !ok {
		return testCfg{}, fmt.Errorf("%s: must be a mapping", name)
	}
	for _, k := range o.Keys {
		if k != "version" && k != "name" {
			return testCfg{}, fmt.Errorf("%s: %s: unknown field", name, k)
		}
	}
	if v, _ := o.Get("version"); v != conf.Number("1") {
		return testCfg{}, fmt.Errorf("%s: version: must be 1", name)
	}
	n, _ := o.Get("name")
	s, ok := n.(string)
	if !ok || s == "" {
		return testCfg{}, fmt.Errorf("%s: name: must be a non-empty string", name)
	}
	return testCfg{Name: s}, nil
}

func doc(name string) string { return "version: 1\nname: " + name + "\n" }

type applied struct {
	name, from string
}

type report struct {
	from string
	err  error
}

// recorder collects the loader's calls to Apply and Report.
type recorder struct {
	mu       sync.Mutex
	applies  []applied
	reports  []report
	inApply  bool
	overlaps int
}

func (r *recorder) apply(cfg testCfg, from string) {
	r.mu.Lock()
	if r.inApply {
		r.overlaps++
	}
	r.inApply = true
	r.mu.Unlock()
	time.Sleep(time.Millisecond) // widen the window in which an overlapping call would show
	r.mu.Lock()
	r.inApply = false
	r.applies = append(r.applies, applied{cfg.Name, from})
	r.mu.Unlock()
}

func (r *recorder) report(from string, err error) {
	r.mu.Lock()
	r.reports = append(r.reports, report{from, err})
	r.mu.Unlock()
}

func (r *recorder) applyCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.applies)
}

func (r *recorder) last() applied {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.applies) == 0 {
		return applied{}
	}
	return r.applies[len(r.applies)-1]
}

const waitLimit = 20 * time.Second

// waitFor polls cond until it holds, failing the test after waitLimit.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", waitLimit, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitApply waits until the last config applied is name from from.
func (r *recorder) waitApply(t *testing.T, name, from string) {
	t.Helper()
	waitFor(t, fmt.Sprintf("Apply(%s, %s); last was %+v", name, from, r.last()), func() bool {
		return r.last() == applied{name, from}
	})
}

// waitReport waits for a report after the first skip reports that from made with an error
// satisfying match (nil: no error), and returns how many reports there are then.
func (r *recorder) waitReport(t *testing.T, skip int, from string, match func(error) bool) int {
	t.Helper()
	n := 0
	waitFor(t, "a report from "+from, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, rep := range r.reports[min(skip, len(r.reports)):] {
			if rep.from == from && match(rep.err) {
				n = len(r.reports)
				return true
			}
		}
		return false
	})
	return n
}

// notFoundReports counts the reports from from that the remote has no document.
func (r *recorder) notFoundReports(from string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, rep := range r.reports {
		if rep.from == from && errors.Is(rep.err, ErrNoConfig) {
			n++
		}
	}
	return n
}

func (r *recorder) overlapCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.overlaps
}

func (r *recorder) reportCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.reports)
}

func noError(err error) bool { return err == nil }

func errContains(s string) func(error) bool {
	return func(err error) bool { return err != nil && strings.Contains(err.Error(), s) }
}

// settle waits until no check is running, so that everything a check started (its Apply) is
// done.
func settle[T any](l *Loader[T]) {
	l.mu.Lock()
	l.mu.Unlock()
}

// writeFile replaces the file at once, so that the poller never reads half of it.
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// run starts l.Run and stops it when the test ends.
func run[T any](t *testing.T, l *Loader[T]) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		l.Run(ctx)
		close(done)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(waitLimit):
			t.Errorf("Run did not return after its context ended")
		}
	})
}

func newTestLoader(file string, remote Remote, interval time.Duration) (*Loader[testCfg], *recorder) {
	r := &recorder{}
	l := NewLoader(Options[testCfg]{
		File: file, Remote: remote, Parse: parseTest,
		Apply: r.apply, Report: r.report, Interval: interval,
	})
	return l, r
}

func TestLoaderFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "diana.yaml")
	from := "file " + path
	writeFile(t, path, doc("one"))
	l, r := newTestLoader(path, nil, 10*time.Millisecond)
	if err := l.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := r.last(); got != (applied{"one", from}) {
		t.Fatalf("after Load, applied %+v", got)
	}
	run(t, l)

	writeFile(t, path, doc("two"))
	r.waitApply(t, "two", from)

	// An invalid file is rejected, reported with its field, and the last good config stays.
	n := r.applyCount()
	writeFile(t, path, "version: 1\nname: 5\n")
	r.waitReport(t, 0, from, errContains(from+": name: must be a non-empty string"))
	writeFile(t, path, "version: 1\nname: two\nextra: x\n")
	r.waitReport(t, 0, from, errContains(from+": extra: unknown field"))
	writeFile(t, path, "version: 1\nname: [\n")
	r.waitReport(t, 0, from, errContains(from+": line 2: did not find expected node content"))
	writeFile(t, path, "")
	r.waitReport(t, 0, from, errContains(from+": empty document"))
	os.Remove(path)
	r.waitReport(t, 0, from, errContains("no such file or directory"))
	settle(l)
	if got := r.applyCount(); got != n {
		t.Fatalf("Apply called %d times for invalid or missing files; want 0 (last: %+v)", got-n, r.last())
	}

	// JSON content in a .yaml file is YAML, which reads it fine.
	writeFile(t, path, `{"version": 1, "name": "three"}`)
	r.waitApply(t, "three", from)

	// Same bytes again (a new file with a new time): reported, not applied again.
	n = r.applyCount()
	reports := r.reportCount()
	writeFile(t, path, `{"version": 1, "name": "three"}`)
	time.Sleep(50 * time.Millisecond) // several polls
	settle(l)
	if got := r.applyCount(); got != n {
		t.Fatalf("rewriting the same bytes called Apply %d times", got-n)
	}
	if got := r.reportCount(); got != reports {
		t.Fatalf("rewriting the same bytes made %d reports, want 0", got-reports)
	}
	if n := r.overlapCount(); n != 0 {
		t.Fatalf("Apply overlapped itself %d times", n)
	}
}

// With an hour between polls, only Reload can pick up a change.
func TestLoaderReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "diana.json")
	from := "file " + path
	writeFile(t, path, `{"version": 1, "name": "one"}`)
	l, r := newTestLoader(path, nil, time.Hour)
	if err := l.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	run(t, l)
	writeFile(t, path, `{"version": 1, "name": "two"}`)
	l.Reload()
	r.waitApply(t, "two", from)

	// Reload reports an unchanged file too.
	n := r.reportCount()
	l.Reload()
	r.waitReport(t, n, from, noError)
	if got := r.applyCount(); got != 2 {
		t.Fatalf("Apply called %d times, want 2", got)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	writeFile(t, bad, "version: 2\nname: x\n")

	l, _ := newTestLoader(filepath.Join(dir, "missing.yaml"), nil, time.Hour)
	if err := l.Load(context.Background()); err == nil || !strings.Contains(err.Error(), "no such file or directory") {
		t.Fatalf("Load of a missing file: %v", err)
	}
	l, _ = newTestLoader(bad, nil, time.Hour)
	if err := l.Load(context.Background()); err == nil || !strings.Contains(err.Error(), "bad.yaml: version: must be 1") {
		t.Fatalf("Load of an invalid file: %v", err)
	}
	l, _ = newTestLoader("", nil, time.Hour)
	if err := l.Load(context.Background()); err == nil || err.Error() != "config: no file and no remote source" {
		t.Fatalf("Load with no source: %v", err)
	}

	// Both sources fail: the error gives both reasons.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("version: 1\nname: x\nname: y\n"))
	}))
	defer srv.Close()
	l, r := newTestLoader(bad, &HTTP{URL: srv.URL + "/c.yaml"}, time.Hour)
	err := l.Load(context.Background())
	if err == nil || !strings.Contains(err.Error(), `c.yaml: line 3: duplicate key "name" (first at line 2)`) ||
		!strings.Contains(err.Error(), "version: must be 1") {
		t.Fatalf("Load with both sources invalid: %v", err)
	}
	if r.applyCount() != 0 || r.reportCount() != 2 {
		t.Fatalf("applies %d, reports %d; want 0 and 2", r.applyCount(), r.reportCount())
	}
}

// docServer serves a document with an ETag and answers If-None-Match with 304. It requires a
// bearer token, so that the tests prove the remote's headers are sent.
type docServer struct {
	mu           sync.Mutex
	body         string
	status       int // if not 0, the answer instead of the document
	ok, notMod   int // 200 and 304 answers
	statuses     int // answers with status
	unauthorized int
}

func (s *docServer) set(body string, status int) {
	s.mu.Lock()
	s.body, s.status, s.statuses = body, status, 0
	s.mu.Unlock()
}

// count returns the answers with the status set by set (404, 500, ...).
func (s *docServer) count(status int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.status != status {
		return 0
	}
	return s.statuses
}

func (s *docServer) count304() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.notMod
}

func (s *docServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer secret" {
		s.unauthorized++
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	if s.status != 0 {
		s.statuses++
		w.WriteHeader(s.status)
		return
	}
	etag := fmt.Sprintf(`"%x"`, sha256.Sum256([]byte(s.body)))
	if r.Header.Get("If-None-Match") == etag {
		s.notMod++
		w.WriteHeader(http.StatusNotModified)
		return
	}
	s.ok++
	w.Header().Set("ETag", etag)
	w.Write([]byte(s.body))
}

// serveOn serves h on addr ("127.0.0.1:0" for any port), retrying while the port is still
// held by a server just closed.
func serveOn(t *testing.T, addr string, h http.Handler) *httptest.Server {
	t.Helper()
	var l net.Listener
	waitFor(t, "listening on "+addr, func() bool {
		var err error
		l, err = net.Listen("tcp", addr)
		return err == nil
	})
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

func TestLoaderHTTP(t *testing.T) {
	path := filepath.Join(t.TempDir(), "diana.yaml")
	fileFrom := "file " + path
	writeFile(t, path, doc("file1"))
	ds := &docServer{body: doc("remote1")}
	srv := serveOn(t, "127.0.0.1:0", ds)
	addr := srv.Listener.Addr().String()
	remote := &HTTP{URL: srv.URL + "/diana.yaml", Header: http.Header{"Authorization": {"Bearer secret"}}}
	remFrom := "http " + remote.URL
	l, r := newTestLoader(path, remote, 10*time.Millisecond)

	// The remote wins over the file.
	if err := l.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := r.last(); got != (applied{"remote1", remFrom}) {
		t.Fatalf("after Load, applied %+v", got)
	}
	run(t, l)

	// Unchanged: 304 answers, and no new Apply.
	n304 := ds.count304()
	waitFor(t, "three 304 answers", func() bool { return ds.count304() >= n304+3 })
	settle(l)
	if got := r.applyCount(); got != 1 {
		t.Fatalf("Apply called %d times while the remote answered 304; want 1", got)
	}

	// An invalid remote document is rejected and the last good remote config stays, even
	// though the file is valid.
	ds.set("version: 1\nname: 5\n", 0)
	r.waitReport(t, 0, remFrom, errContains(remFrom+": name: must be a non-empty string"))
	n304 = ds.count304()
	waitFor(t, "a 304 answer", func() bool { return ds.count304() > n304 })
	settle(l)
	if got := r.last(); got != (applied{"remote1", remFrom}) || r.applyCount() != 1 {
		t.Fatalf("after an invalid remote document, applied %+v (%d calls)", got, r.applyCount())
	}

	ds.set(doc("remote2"), 0)
	r.waitApply(t, "remote2", remFrom)

	// A file change while the remote is valid is accepted but does not apply.
	writeFile(t, path, doc("file2"))
	r.waitReport(t, 0, fileFrom, noError)
	settle(l)
	if got := r.last(); got != (applied{"remote2", remFrom}) {
		t.Fatalf("after a file change, applied %+v", got)
	}

	// No document on the remote (404): the remote's last valid document stays, and the
	// report says why, once, not at every poll.
	ds.set(doc("remote2"), http.StatusNotFound)
	mark := r.reportCount()
	r.waitReport(t, mark, remFrom, func(err error) bool { return errors.Is(err, ErrNoConfig) })
	n404 := ds.count(http.StatusNotFound)
	waitFor(t, "five more 404 answers", func() bool { return ds.count(http.StatusNotFound) >= n404+5 })
	settle(l)
	if got, n := r.last(), r.notFoundReports(remFrom); got != (applied{"remote2", remFrom}) || n != 1 {
		t.Fatalf("while the remote answers 404: applied %+v, %d reports of it; want remote2 and 1", got, n)
	}

	// The document is back, unchanged: a 304, and nothing to apply.
	n304 = ds.count304()
	ds.set(doc("remote2"), 0)
	waitFor(t, "a 304 answer", func() bool { return ds.count304() > n304 })

	// The server goes away: the remote's last document stays, and the failure is reported.
	srv.Close()
	mark = r.reportCount()
	r.waitReport(t, mark, remFrom, func(err error) bool {
		return err != nil && !errors.Is(err, ErrNoConfig) && strings.Contains(err.Error(), "connection refused")
	})
	settle(l)
	if got := r.last(); got != (applied{"remote2", remFrom}) {
		t.Fatalf("with the remote down, applied %+v", got)
	}

	// It comes back on the same address with a new document, which applies.
	ds.set(doc("remote3"), 0)
	serveOn(t, addr, ds)
	r.waitApply(t, "remote3", remFrom)

	ds.mu.Lock()
	defer ds.mu.Unlock()
	if ds.unauthorized != 0 {
		t.Fatalf("%d requests came without the Authorization header", ds.unauthorized)
	}
	if n := r.overlapCount(); n != 0 {
		t.Fatalf("Apply overlapped itself %d times", n)
	}
}

// An invalid remote with no good remote config before: the file applies.
func TestLoaderHTTPInvalidFirst(t *testing.T) {
	path := filepath.Join(t.TempDir(), "diana.yaml")
	writeFile(t, path, doc("file1"))
	ds := &docServer{body: "version: 1\nnam: x\n"}
	srv := serveOn(t, "127.0.0.1:0", ds)
	remote := &HTTP{URL: srv.URL, Header: http.Header{"Authorization": {"Bearer secret"}}}
	l, r := newTestLoader(path, remote, 10*time.Millisecond)
	if err := l.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := r.last(); got != (applied{"file1", "file " + path}) {
		t.Fatalf("applied %+v", got)
	}
	r.waitReport(t, 0, remote.Name(), errContains("nam: unknown field"))
	run(t, l)
	ds.set(doc("remote1"), 0)
	r.waitApply(t, "remote1", remote.Name())
}

func TestHTTPFetch(t *testing.T) {
	big := strings.Repeat("#", MaxSize+1)
	exact := strings.Repeat("#", MaxSize)
	tests := []struct {
		name    string
		handler http.HandlerFunc
		want    string // error text, "" for success
		noConf  bool   // the error wraps ErrNoConfig
		timeout time.Duration
	}{
		{"200", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("a: 1")) }, "", false, 0},
		{"4 MiB", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(exact)) }, "", false, 0},
		{"too large", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(big)) },
			"document larger than 4194304 bytes (4 MiB)", false, 0},
		{"404", func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) }, "404 Not Found: no config document", true, 0},
		{"410", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusGone) }, "410 Gone: no config document", true, 0},
		{"500", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(500) }, "unexpected status 500 Internal Server Error", false, 0},
		{"401", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(401) }, "unexpected status 401 Unauthorized", false, 0},
		{"304 unasked", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(304) },
			"304 Not Modified to a request without If-None-Match", false, 0},
		{"slow", func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-time.After(waitLimit):
			}
		}, "context deadline exceeded", false, 100 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(tt.handler)
			defer srv.Close()
			h := &HTTP{URL: srv.URL + "/x", Timeout: tt.timeout}
			data, changed, err := h.Fetch(context.Background())
			if tt.want == "" {
				if err != nil || !changed || len(data) == 0 {
					t.Fatalf("Fetch = %d bytes, %v, %v; want the body", len(data), changed, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "GET "+srv.URL+"/x: ") {
				t.Fatalf("Fetch error %v, want GET %s/x: ...%s", err, srv.URL, tt.want)
			}
			if errors.Is(err, ErrNoConfig) != tt.noConf {
				t.Fatalf("errors.Is(%v, ErrNoConfig) = %v", err, !tt.noConf)
			}
		})
	}
}

func TestHTTPETag(t *testing.T) {
	ds := &docServer{body: "a: 1"}
	srv := serveOn(t, "127.0.0.1:0", ds)
	h := &HTTP{URL: srv.URL, Header: http.Header{"Authorization": {"Bearer secret"}}}
	ctx := context.Background()
	steps := []struct {
		body    string
		changed bool
	}{
		{"a: 1", true}, {"a: 1", false}, {"a: 1", false}, {"a: 2", true}, {"a: 2", false},
	}
	for i, s := range steps {
		ds.set(s.body, 0)
		data, changed, err := h.Fetch(ctx)
		if err != nil || changed != s.changed || (changed && string(data) != s.body) || (!changed && data != nil) {
			t.Fatalf("step %d: Fetch = %q, %v, %v; want changed %v", i, data, changed, err, s.changed)
		}
	}
	ds.mu.Lock()
	ok, notMod := ds.ok, ds.notMod
	ds.mu.Unlock()
	if ok != 2 || notMod != 3 {
		t.Fatalf("%d answers 200 and %d 304, want 2 and 3", ok, notMod)
	}
	if got, want := (&HTTP{URL: "https://u:pw@cfg.example/x.yaml"}).Name(), "http https://u:xxxxx@cfg.example/x.yaml"; got != want {
		t.Fatalf("Name() = %q, want %q", got, want)
	}
}

// A config path that is not a regular file is refused at once, without reading it: a FIFO
// (which would block until a writer came), /dev/zero (endless), a directory; a file over
// MaxSize is refused after reading MaxSize + 1 bytes.
func TestReadFileRefuses(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, bytes.Repeat([]byte("#"), MaxSize+1), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		fifo:        "not a regular file",
		"/dev/zero": "not a regular file",
		dir:         "not a regular file",
		big:         "larger than 4194304 bytes",
	} {
		done := make(chan error, 1)
		go func() { _, err := ReadFile(name); done <- err }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("ReadFile(%s): %v, want %q", name, err, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("ReadFile(%s) still blocked after 10 s", name)
		}
	}
}

// slowRemote answers after delay.
type slowRemote struct {
	delay time.Duration
	body  string
}

func (s *slowRemote) Name() string { return "slow" }

func (s *slowRemote) Fetch(ctx context.Context) ([]byte, bool, error) {
	select {
	case <-time.After(s.delay):
		return []byte(s.body), true, nil
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
}

// A slow remote does not hold up the start: Load applies the file after StartWait, and Run
// switches to the remote's document when it arrives.
func TestSlowRemoteAtStart(t *testing.T) {
	path := filepath.Join(t.TempDir(), "diana.yaml")
	writeFile(t, path, doc("file1"))
	l, r := newTestLoader(path, &slowRemote{delay: 3 * time.Second, body: doc("remote1")}, time.Hour)
	began := time.Now()
	if err := l.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took >= 3*time.Second {
		t.Fatalf("Load waited %v, the remote's whole delay", took)
	}
	if got := r.last(); got != (applied{"file1", "file " + path}) {
		t.Fatalf("after Load, applied %+v; want the file's", got)
	}
	run(t, l)
	r.waitApply(t, "remote1", "slow")
}
