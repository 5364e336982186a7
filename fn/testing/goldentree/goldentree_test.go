package goldentree

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

func TestWriteThenDiff(t *testing.T) {
	dir := t.TempDir() + "/tree"
	want := map[string][]byte{"a.yaml": []byte("x: 1\n"), "sub/b.yaml": []byte("y: 2\n")}
	if d := Diff(dir, want); len(d) != 2 {
		t.Fatalf("absent dir: %v", d)
	}
	if err := Write(dir, want); err != nil {
		t.Fatal(err)
	}
	if d := Diff(dir, want); len(d) != 0 {
		t.Fatalf("after write: %v", d)
	}
	changed := map[string][]byte{"a.yaml": []byte("x: 2\n"), "c.yaml": nil}
	d := Diff(dir, changed)
	joined := strings.Join(d, "\n")
	for _, want := range []string{`a.yaml: differs: line 1: committed "x: 1", now "x: 2"`, "c.yaml: missing", "b.yaml: not produced any more"} {
		if !strings.Contains(joined, want) {
			t.Errorf("diff %q lacks %q", joined, want)
		}
	}
}

// recorder keeps File's complaints instead of failing the test that checks them.
type recorder struct {
	testing.TB
	errors []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.errors = append(r.errors, fmt.Sprintf(format, args...))
}

func TestFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.golden")
	File(t, path, []byte("a\nb\n"), true)
	File(t, path, []byte("a\nb\n"), false)
	r := &recorder{TB: t}
	File(r, path, []byte("a\nc\n"), false)
	if len(r.errors) != 1 || !strings.Contains(r.errors[0], `line 2: committed "b", now "c"`) || !strings.Contains(r.errors[0], "make update-rendered") {
		t.Errorf("a changed file must name its first changed line and how to regenerate: %q", r.errors)
	}
}

func TestTree(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tree")
	want := map[string][]byte{"a.yaml": []byte("x: 1\n")}
	Tree(t, dir, want, true)
	Tree(t, dir, want, false)
	r := &recorder{TB: t}
	Tree(r, dir, map[string][]byte{"b.yaml": []byte("y: 1\n")}, false)
	if len(r.errors) != 2 || !strings.Contains(strings.Join(r.errors, "\n"), "a.yaml: not produced any more") {
		t.Errorf("want one error per missing and extra file: %q", r.errors)
	}
}
