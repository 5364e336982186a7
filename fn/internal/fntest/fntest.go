// Package fntest holds a test helper the audit and diff tests share: writing the tree
// `gpupolicy-fn render -o` would write for a policy. Golden files are goldentree.File.
package fntest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gpupolicy/gpupolicy/fn/pipeline"
	"github.com/gpupolicy/gpupolicy/fn/render"
	"github.com/gpupolicy/gpupolicy/fn/validate"
)

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
