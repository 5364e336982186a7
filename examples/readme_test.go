package examples

import (
	"os"
	"strings"
	"testing"
)

// TestREADMEListsEveryDirectory: examples/README.md has a row for each example directory.
func TestREADMEListsEveryDirectory(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") && !strings.Contains(string(readme), "| [`"+e.Name()+"/`]("+e.Name()+") |") {
			t.Errorf("examples/README.md has no row for %s/", e.Name())
		}
	}
}
