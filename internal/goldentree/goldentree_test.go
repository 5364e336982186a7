package goldentree

import (
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
