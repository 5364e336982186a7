package hostfs

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestWriteFileAtomicAndIdempotent(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "sub", "f.toml")
	var steps []string
	w := Writer{Step: func(p string) { steps = append(steps, p) }}
	wrote, err := w.WriteFile(dir, "/sub/f.toml", []byte("a = 1\n"), 0o640)
	if err != nil || !wrote {
		t.Fatalf("first write: %v %v", wrote, err)
	}
	want := []string{"mkdir", "create-temp", "write-half", "write", "fsync", "rename", "fsync-dir"}
	if !slices.Equal(steps, want) {
		t.Fatalf("steps %v, want %v", steps, want)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o640 {
		t.Fatalf("mode %v", st.Mode())
	}
	steps = nil
	if wrote, err = w.WriteFile(dir, "/sub/f.toml", []byte("a = 1\n"), 0o640); err != nil || wrote || len(steps) != 0 {
		t.Fatalf("same bytes rewritten: %v %v %v", wrote, err, steps)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Fatalf("temp files left: %v", entries)
	}
}

func TestCleanTempsAndRemove(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, ".f.toml"+TempMarker+"abc")
	keep := filepath.Join(dir, "f.toml")
	for _, p := range []string{stale, keep} {
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := CleanTemps(dir, "/"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatal("stale temp kept")
	}
	if removed, err := (Writer{}).Remove(dir, "/f.toml"); err != nil || !removed {
		t.Fatalf("remove: %v %v", removed, err)
	}
	if removed, err := (Writer{}).Remove(dir, "/f.toml"); err != nil || removed {
		t.Fatalf("remove absent: %v %v", removed, err)
	}
	if err := CleanTemps(dir, "/missing"); err != nil {
		t.Fatal(err)
	}
}

// WriteOwned refuses a link at the file's own name (naming it, its target and the fix) and
// writes nothing; a link in a directory on the way is followed.
func TestWriteOwnedRefusesLink(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "etc/real"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(root, "etc/real/own")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real", filepath.Join(root, "etc/dir")); err != nil {
		t.Fatal(err)
	}
	_, err := Writer{}.WriteOwned(root, "/etc/dir/own", []byte("y"), 0o644)
	if !errors.Is(err, ErrOwnedLink) || !strings.Contains(err.Error(), "host path /etc/dir/own under --host-root "+root+" is a symbolic link to /etc/passwd") ||
		!strings.Contains(err.Error(), "remove the link (rm /etc/dir/own on the node)") {
		t.Fatalf("got %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "etc/passwd")); string(b) != "x" {
		t.Fatalf("written through the link: %q", b)
	}
	if _, err := (Writer{}).WriteOwned(root, "/etc/dir/new", []byte("y"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "etc/real/new")); string(b) != "y" {
		t.Fatalf("through the directory link: %q", b)
	}
}
