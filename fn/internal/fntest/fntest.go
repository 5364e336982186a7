// Package fntest holds the test helpers the audit and diff tests share: golden files with an
// -update flag, and writing the tree `gpupolicy-fn render -o` would write for a policy.
package fntest

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpupolicy/gpupolicy/fn/pipeline"
	"github.com/gpupolicy/gpupolicy/fn/render"
	"github.com/gpupolicy/gpupolicy/fn/validate"
)

// Golden compares got with the file at path, or rewrites the file when update is set.
func Golden(t testing.TB, path string, got []byte, update bool) {
	t.Helper()
	if update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run the test with -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the output (run the test with -update and review the diff):\n%s", path, got)
	}
}

// WriteTree renders policy and writes the files `gpupolicy-fn render -o` would into a
// temporary directory, which it returns.
func WriteTree(t testing.TB, policy string) string {
	t.Helper()
	data, err := os.ReadFile(policy)
	if err != nil {
		t.Fatal(err)
	}
	p, objs, res := pipeline.Load(data, validate.Options{})
	if res.HasErrors() {
		t.Fatal(res.Text(policy))
	}
	opts := render.DefaultFileOptions()
	opts.FluxPath = "./clusters/test" // required by the Flux layout, irrelevant otherwise
	files, err := render.Files(p, objs, opts)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, b := range files {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
