package goldentree

import (
	"bytes"
	"os"
	"testing"
)

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
		t.Fatalf("%v (run the test with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the output (run the test with -update and review the diff): %s", path, FirstDiff(want, got))
	}
}
