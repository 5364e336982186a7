// Package goldentree is test support: it compares a rendered tree (relative path → bytes) with
// a committed directory and rewrites the directory on -update, and does the same for one golden
// file (File). The committed trees under policies/ and examples/ are what users copy into their
// repositories, so a stale one is a bug. It lives outside an internal/ directory so the tests
// of policies/ and examples/ can import it; no program does.
package goldentree

import (
	"bytes"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Read returns every regular file under dir keyed by its slash-separated relative path.
func Read(dir string) (map[string][]byte, error) {
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		files[filepath.ToSlash(rel)] = b
		return err
	})
	return files, err
}

// Diff lists how dir differs from want: missing, extra and changed files (with the first
// changed line), in path order. An absent dir differs in every file.
func Diff(dir string, want map[string][]byte) []string {
	got, err := Read(dir)
	if err != nil && !os.IsNotExist(err) {
		return []string{err.Error()}
	}
	var out []string
	for _, p := range keys(want, got) {
		g, inGot := got[p]
		w, inWant := want[p]
		switch {
		case !inGot:
			out = append(out, fmt.Sprintf("%s: missing", filepath.Join(dir, p)))
		case !inWant:
			out = append(out, fmt.Sprintf("%s: not produced any more", filepath.Join(dir, p)))
		case !bytes.Equal(g, w):
			out = append(out, fmt.Sprintf("%s: differs: %s", filepath.Join(dir, p), FirstDiff(g, w)))
		}
	}
	return out
}

// Write replaces dir with exactly the files of want.
func Write(dir string, want map[string][]byte) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	for _, p := range keys(want, nil) {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(full, want[p], 0o644); err != nil {
			return err
		}
	}
	return nil
}

func keys(a, b map[string][]byte) []string {
	out := slices.AppendSeq(slices.Collect(maps.Keys(a)), maps.Keys(b))
	slices.Sort(out)
	return slices.Compact(out)
}

// FirstDiff describes the first line where committed and now differ.
func FirstDiff(committed, now []byte) string {
	got, want := committed, now
	g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d: committed %q, now %q", i+1, gl, wl)
		}
	}
	return "trailing bytes differ"
}
