package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// The command line: help and version exit 0, validate lists every error of a config with its
// field and exits 1, misuse exits 2.
func TestCommandLine(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("version: 1\nlisten: ':99999'\nrules:\n  - name: a\n    limit: {algorithm: fixed_window, limit: 0, window: 1m}\n"), 0o600)
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args     []string
		code     int
		out, err []string // what stdout and stderr must hold
	}{
		{[]string{"help"}, 0, []string{"dianad validate FILE", "dianad version", "-config FILE"}, nil},
		{[]string{"--help"}, 0, []string{"dianad validate FILE"}, nil},
		{[]string{"-h"}, 0, []string{"dianad validate FILE"}, nil},
		{[]string{"version"}, 0, []string{"dianad ", "go1."}, nil},
		{[]string{"--version"}, 0, []string{"dianad "}, nil},
		{[]string{"validate", "../../examples/diana.yaml"}, 0, []string{"diana.yaml: the config is valid"}, nil},
		{[]string{"validate", bad}, 1, nil, []string{"listen", "rules[0].limit.limit"}},
		{[]string{"validate", fifo}, 1, nil, []string{"not a regular file"}},
		{[]string{"validate", filepath.Join(dir, "missing.yaml")}, 1, nil, []string{"no such file"}},
		{[]string{"validate"}, 2, nil, []string{"usage: dianad validate FILE"}},
		{[]string{"--no-such-flag"}, 2, nil, []string{"flag provided but not defined"}},
		{[]string{"serve"}, 2, nil, []string{`unexpected argument "serve"`}},
		{[]string{"--config", fifo}, 1, nil, []string{"not a regular file"}},
	} {
		var out, errb bytes.Buffer
		code := dianad(c.args, &out, &errb)
		if code != c.code {
			t.Errorf("dianad %v: exit %d, want %d; stderr %q", c.args, code, c.code, errb.String())
		}
		for _, s := range c.out {
			if !strings.Contains(out.String(), s) {
				t.Errorf("dianad %v: stdout %q lacks %q", c.args, out.String(), s)
			}
		}
		for _, s := range c.err {
			if !strings.Contains(errb.String(), s) {
				t.Errorf("dianad %v: stderr %q lacks %q", c.args, errb.String(), s)
			}
		}
	}
}
