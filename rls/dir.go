package rls

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/diana-gw/diana/config"
)

// MaxFiles bounds the files of a config directory.
const MaxFiles = 1000

// ReadDir reads the descriptor config files of dir, as envoyproxy/ratelimit reads
// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config: every regular file directly in it, in name order,
// except those whose name starts with '.' (editors' and Kubernetes' ..data entries). Each file
// is a YAML (or JSON) document of at most config.MaxSize bytes. The signature changes whenever a
// file is added, removed, or changes size or modification time: Watch compares it.
func ReadDir(dir string) ([]File, string, error) {
	sig, names, err := Signature(dir)
	if err != nil {
		return nil, "", err
	}
	files := make([]File, 0, len(names))
	for _, name := range names {
		data, err := config.ReadRegular(name, config.MaxSize)
		if err != nil {
			return nil, "", fmt.Errorf("rls: %w", err)
		}
		files = append(files, File{Name: name, Data: data})
	}
	return files, sig, nil
}

// Signature lists the config files of dir and sums up their names, sizes and modification times.
func Signature(dir string) (string, []string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", nil, fmt.Errorf("rls: config_dir: %w", err)
	}
	var b strings.Builder
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		name := filepath.Join(dir, e.Name())
		fi, err := os.Stat(name) // follows symbolic links (a ConfigMap's files are links)
		if err != nil {
			return "", nil, fmt.Errorf("rls: %w", err)
		}
		if !fi.Mode().IsRegular() {
			continue
		}
		if len(names) == MaxFiles {
			return "", nil, fmt.Errorf("rls: config_dir %s: more than %d files", dir, MaxFiles)
		}
		names = append(names, name)
		b.WriteString(name + "\x00" + strconv.FormatInt(fi.Size(), 10) + "\x00" + strconv.FormatInt(fi.ModTime().UnixNano(), 10) + "\n")
	}
	slices.Sort(names)
	return b.String(), names, nil
}
