// Command gen writes the files derived from the grammar's declarations: the JSON Schemas of
// schema/ (from the config readers with schema/src, and from shared/rules' algorithm registry),
// the algorithm tables of README.md and docs/configuration.md (from the registry) and the field
// tables of docs/configuration.md (from the readers; see fields.go).
//
// go generate runs it in schema/ (//go:generate in schema.go; make generate runs every
// directive). It writes only the files whose content changes, so a second run changes nothing.
// Its test fails when a committed file is not what it writes.
package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"

	"github.com/diana-gw/diana/schema"
)

// file is one generated file: its path from the module's root, and how it is made from what
// the file holds now (a page of prose keeps all but its generated parts).
type file struct {
	path string
	make func(old []byte) ([]byte, error)
}

// whole is a file generated whole: what it holds now does not matter.
func whole(gen func() ([]byte, error)) func([]byte) ([]byte, error) {
	return func([]byte) ([]byte, error) { return gen() }
}

// files are the generated files, in the order they are written.
func files() []file {
	fs := []file{{path.Join("schema", schema.LimitFile), whole(limitSchema)}}
	for _, g := range grammars {
		fs = append(fs, file{path.Join("schema", g.file), whole(func() ([]byte, error) { return grammarSchema(g) })})
	}
	return append(fs,
		file{"docs/configuration.md", configurationPage},
		file{"README.md", func(old []byte) ([]byte, error) { return splice(old, "algorithms", text(readmeTable())) }},
	)
}

// configurationPage is docs/configuration.md with its algorithm table and field tables made.
func configurationPage(page []byte) ([]byte, error) {
	page, err := splice(page, "algorithms", text(docsTable()))
	for _, t := range configurationTables {
		if err != nil {
			break
		}
		page, err = splice(page, t.section(), t.render)
	}
	return page, err
}

// generate returns what f holds after generation, and what it holds now (nil: no such file).
func generate(f file) (want, old []byte, err error) {
	old, err = os.ReadFile(filepath.FromSlash(f.path))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, nil, err
	}
	want, err = f.make(old)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", f.path, err)
	}
	return want, old, nil
}

// moduleRoot returns the directory of go.mod, from the working directory up: the paths of the
// files are from there, wherever gen runs.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", errors.New("no go.mod here or above: run gen with go generate ./schema")
		}
		dir = up
	}
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "schema/internal/gen:", err)
		os.Exit(1)
	}
}

func run() error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	if err := os.Chdir(root); err != nil {
		return err
	}
	for _, f := range files() {
		want, old, err := generate(f)
		if err != nil {
			return err
		}
		if bytes.Equal(want, old) {
			continue
		}
		if err := os.WriteFile(filepath.FromSlash(f.path), want, 0o644); err != nil {
			return err
		}
	}
	return nil
}
