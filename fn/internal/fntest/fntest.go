// Package fntest holds the test helpers the fn subcommands' tests share: running a subcommand
// in process, and writing the tree `gpupolicy-fn render -o` would write for a policy. Golden
// files are goldentree.File.
package fntest

import (
	"bytes"
	"context"
	"io"
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

// Command is a `gpupolicy-fn` subcommand's entry point, as fn/main.go wires it.
type Command func(ctx context.Context, args []string, stdout, stderr io.Writer) int

// Run runs a subcommand in process and returns its exit code and what it wrote.
func Run(cmd Command, args ...string) (code int, stdout, stderr string) {
	var out, errs bytes.Buffer
	code = cmd(context.Background(), args, &out, &errs)
	return code, out.String(), errs.String()
}
