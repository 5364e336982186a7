package goldentree

import (
	"bytes"
	"os"
	"testing"
)

// regenerate is how every golden file and tree of the repository is rewritten (the Makefile's
// GOLDEN_PKGS run with -update).
const regenerate = "regenerate with `make update-rendered` (or go test PKG -update) and review the diff"

// File compares got with the golden file at path, or rewrites the file when update is set
// (each package's -update flag). A difference names the first changed line.
func File(t testing.TB, path string, got []byte, update bool) {
	t.Helper()
	if update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v: %s", err, regenerate)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is stale: %s; %s", path, FirstDiff(want, got), regenerate)
	}
}

// Tree compares the files of want with the committed directory dir, or replaces dir with them
// when update is set. Each missing, extra or changed file is one error.
func Tree(t testing.TB, dir string, want map[string][]byte, update bool) {
	t.Helper()
	if update {
		if err := Write(dir, want); err != nil {
			t.Fatal(err)
		}
		return
	}
	for _, d := range Diff(dir, want) {
		t.Errorf("%s; %s", d, regenerate)
	}
}
