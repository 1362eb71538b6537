package config

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/diana-gw/diana/shared/conf"
)

// MaxSize is the largest document accepted from any source, in bytes. MaxSecret and MaxCA bound
// the files a config names (ReadRegular): a secret is a password or a token, a PEM file (CAs, a
// client certificate or its key) a few hundred certificates at most.
const (
	MaxSize   = 4 << 20
	MaxSecret = 64 << 10
	MaxCA     = 4 << 20
)

// DefaultInterval is how often sources are checked when Options.Interval is zero.
const DefaultInterval = 5 * time.Second

// ErrNoConfig is wrapped by the error of a Remote that is reachable but holds no document (HTTP
// 404, a missing Redis key). The loader treats it like an unreachable remote (the remote's last
// valid document keeps applying), but Report can tell the two apart with errors.Is.
var ErrNoConfig = errors.New("no config document")

// Remote is a source of config documents other than the local file.
type Remote interface {
	// Name names the source for Apply and Report, e.g. "http https://cfg.example/diana.yaml"
	// or "redis diana:config". Decode also picks the syntax by its extension.
	Name() string
	// Fetch returns the current document. changed is false, with nil data, when the document
	// is the same as the one the last successful Fetch returned. An error means the remote is
	// unreachable or has no document (ErrNoConfig).
	Fetch(ctx context.Context) (data []byte, changed bool, err error)
}

// Watcher is implemented by a Remote that can announce changes (a Redis pub/sub channel). Watch
// runs until ctx ends and calls notify whenever the document may have changed or the remote
// may have become unreachable; the loader then checks at once instead of at its next poll.
type Watcher interface {
	Watch(ctx context.Context, notify func())
}

// Options configure a Loader.
type Options[T any] struct {
	File   string // local config file; may be empty if Remote is set
	Remote Remote // optional remote source

	// Parse validates a decoded document; its errors should name the field and the reason.
	// name is the source, as given to Apply.
	Parse func(doc conf.Value, name string) (T, error)

	// Apply is called with every new effective config; from is "file PATH" or the Remote's
	// Name. Calls never overlap. It runs inside a check, so it must not call Load.
	Apply func(cfg T, from string)

	// Report, if set, is called after every attempt to load a new document (err nil: accepted)
	// and after every failed read or fetch, for logs and metrics. A check that finds a source
	// unchanged is not reported, except on Load and Reload.
	Report func(from string, err error)

	// Interval is how often the file and the remote are checked; DefaultInterval if zero.
	Interval time.Duration
}

// Loader keeps the effective config of one process. Once the remote has sent a valid document,
// its last valid document applies, whatever happens to the remote after (unreachable, slow, an
// oversized document, none at all): a failing config server must not swap a fleet's rules for
// the files'. Until then the file's last valid document applies. An invalid document from either
// source is rejected (Report gets the error) and that source's last valid document is kept. A
// remote that keeps failing the same way is reported when it starts, not at every check.
type Loader[T any] struct {
	o        Options[T]
	fileFrom string
	remFrom  string
	reload   chan struct{}
	notify   chan struct{}

	mu       sync.Mutex // held by a check from its first read to Apply
	file     source[T]
	remote   source[T]
	fileStat os.FileInfo // the file's state when last read; nil: read it at the next check
	applied  struct {
		from string
		data []byte
		ok   bool
	}
}

// source is what the loader knows of one source.
type source[T any] struct {
	data    []byte // the last document read, valid or not
	read    bool   // data holds a document
	err     error  // why data is invalid, or nil
	failing string // remote: the error of the failing Fetches, reported once; "" while it answers

	good     bool // cfg and goodData hold the last valid document
	cfg      T
	goodData []byte
}

// NewLoader returns a loader; nothing is read until Load or Run.
func NewLoader[T any](o Options[T]) *Loader[T] {
	if o.Interval <= 0 {
		o.Interval = DefaultInterval
	}
	l := &Loader[T]{
		o:        o,
		fileFrom: "file " + o.File,
		reload:   make(chan struct{}, 1),
		notify:   make(chan struct{}, 1),
	}
	if o.Remote != nil {
		l.remFrom = o.Remote.Name()
	}
	return l
}

// StartWait is how long Load waits for the remote when there is a file to start on: a slow
// remote does not hold up the start, and Run switches to its document when it arrives.
const StartWait = time.Second

// Load reads the file and fetches the remote, and applies the effective config: the remote's
// if it answered with a valid document (within StartWait when there is a file), else the
// file's. It returns an error, listing why each source failed, if neither yields a valid config
// and none was applied before.
func (l *Loader[T]) Load(ctx context.Context) error {
	if l.o.File == "" && l.o.Remote == nil {
		return errors.New("config: no file and no remote source")
	}
	if l.o.Parse == nil {
		return errors.New("config: Options.Parse is nil")
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.o.File != "" && l.o.Remote != nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, StartWait)
		defer cancel()
	}
	remErr, fileErr := l.check(ctx, true)
	if !l.applied.ok {
		return fmt.Errorf("config: no valid config: %w", errors.Join(remErr, fileErr))
	}
	return nil
}

// Run checks the sources every Interval, at once when the remote announces a change, and when
// Reload asks, until ctx ends. It checks once when it starts, so it may be called without Load.
// It returns when ctx ends and the remote's watch has stopped.
func (l *Loader[T]) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	if w, ok := l.o.Remote.(Watcher); ok {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.Watch(ctx, func() {
				select {
				case l.notify <- struct{}{}:
				default: // a check is already pending
				}
			})
		}()
	}
	t := time.NewTicker(l.o.Interval)
	defer t.Stop()
	force := false
	for {
		if l.o.Parse != nil && (l.o.File != "" || l.o.Remote != nil) {
			l.mu.Lock()
			l.check(ctx, force)
			l.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			force = false
		case <-l.notify:
			force = false
		case <-l.reload:
			force = true
		}
	}
}

// Reload asks Run to read the file and fetch the remote now, even if they seem unchanged, and
// to report each (for SIGHUP). It does not wait.
func (l *Loader[T]) Reload() {
	select {
	case l.reload <- struct{}{}:
	default: // a reload is already pending
	}
}

// check reads both sources and applies the effective config if it changed. force re-reads
// the file even if its size and time are unchanged, and reports unchanged sources. It returns
// each source's error: why it could not be read, or why its current document is invalid.
// l.mu must be held.
func (l *Loader[T]) check(ctx context.Context, force bool) (remErr, fileErr error) {
	if l.o.Remote != nil {
		remErr = l.checkRemote(ctx, force)
	}
	if l.o.File != "" {
		fileErr = l.checkFile(force)
	}
	l.applyEffective()
	return remErr, fileErr
}

func (l *Loader[T]) checkRemote(ctx context.Context, force bool) error {
	s := &l.remote
	data, changed, err := l.o.Remote.Fetch(ctx)
	if err != nil {
		if force || err.Error() != s.failing {
			l.report(l.remFrom, err)
		}
		s.failing = err.Error()
		return err
	}
	s.failing = ""
	if changed && !(s.read && bytes.Equal(data, s.data)) {
		l.accept(s, l.remFrom, data)
	} else if force {
		l.report(l.remFrom, s.err)
	}
	return s.err
}

// racyWindow is how recent a file's modification time must be for the loader to distrust it:
// a write in the same clock tick as the last read leaves size and time unchanged, so such a
// file is read again (and compared byte for byte) until its time is safely in the past.
const racyWindow = 2 * time.Second

func (l *Loader[T]) checkFile(force bool) error {
	s := &l.file
	info, err := os.Stat(l.o.File)
	if err != nil {
		l.fileStat = nil
		err = fmt.Errorf("read config %w", pathError(err))
		l.report(l.fileFrom, err)
		return err
	}
	if !force && l.fileStat != nil && os.SameFile(l.fileStat, info) &&
		info.Size() == l.fileStat.Size() && info.ModTime().Equal(l.fileStat.ModTime()) {
		return s.err
	}
	data, err := ReadFile(l.o.File)
	if err != nil {
		l.fileStat = nil
		l.report(l.fileFrom, err)
		return err
	}
	// info was taken before the read, so a write during the read changes it and is read next time.
	l.fileStat = info
	if time.Since(info.ModTime()) < racyWindow {
		l.fileStat = nil
	}
	if !(s.read && bytes.Equal(data, s.data)) {
		l.accept(s, l.fileFrom, data)
	} else if force {
		l.report(l.fileFrom, s.err)
	}
	return s.err
}

// ReadFile reads a config file: a regular file of at most MaxSize bytes. Anything else (a FIFO,
// which would block the reader until a writer comes, a device such as /dev/zero, a directory)
// is refused without reading it.
func ReadFile(name string) ([]byte, error) {
	data, err := ReadRegular(name, MaxSize)
	if err != nil {
		return nil, fmt.Errorf("read config %w", err)
	}
	return data, nil
}

// ReadRegular reads a file a config names (a config, a secret, a CA bundle): a regular file of
// at most max bytes, so that a path to a FIFO or a device costs no more than a small file. Its
// errors start with the name.
func ReadRegular(name string, max int) ([]byte, error) {
	// Opening a FIFO for reading blocks until a writer comes, unless non-blocking: open so, then
	// look at what was opened (a Stat first would leave a window to swap the file).
	f, err := os.OpenFile(name, os.O_RDONLY|openNonBlock, 0)
	if err != nil {
		return nil, pathError(err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil {
		return nil, pathError(err)
	} else if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file (%s)", name, fi.Mode().Type())
	}
	data, err := io.ReadAll(io.LimitReader(f, int64(max)+1))
	if err != nil {
		return nil, pathError(err)
	}
	if len(data) > max {
		return nil, fmt.Errorf("%s: larger than %d bytes (%s)", name, max, sizeName(max))
	}
	return data, nil
}

// pathError says "NAME: reason" rather than os's "op NAME: reason".
func pathError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", pe.Path, pe.Err)
	}
	return err
}

// sizeName writes n bytes in the largest binary unit that divides it: "4 MiB", "64 KiB".
func sizeName(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// accept validates a new document of source s and reports the outcome.
func (l *Loader[T]) accept(s *source[T], from string, data []byte) {
	s.data, s.read = data, true
	s.err = nil
	doc, err := Decode(data, from)
	var cfg T
	if err == nil {
		cfg, err = l.o.Parse(doc, from)
	}
	if err != nil {
		s.err = err
	} else {
		s.good, s.cfg, s.goodData = true, cfg, data
	}
	l.report(from, err)
}

// applyEffective applies the effective config if its origin or its bytes changed.
func (l *Loader[T]) applyEffective() {
	var s *source[T]
	var from string
	switch {
	case l.o.Remote != nil && l.remote.good:
		s, from = &l.remote, l.remFrom
	case l.file.good:
		s, from = &l.file, l.fileFrom
	default:
		// No valid document from either source yet: whatever applies stays.
		return
	}
	if l.applied.ok && l.applied.from == from && bytes.Equal(l.applied.data, s.goodData) {
		return
	}
	l.applied.from, l.applied.data, l.applied.ok = from, s.goodData, true
	if l.o.Apply != nil {
		l.o.Apply(s.cfg, from)
	}
}

func (l *Loader[T]) report(from string, err error) {
	if l.o.Report != nil {
		l.o.Report(from, err)
	}
}
