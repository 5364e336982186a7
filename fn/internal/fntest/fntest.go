// Package fntest holds the test helpers the fn subcommands' tests share: running a subcommand
// in process (its command line or its typed options), writing files, and writing the tree `gpupolicy-fn
// render -o` would write for a policy. Golden files are goldentree.File.
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
	WriteFiles(t, dir, files)
	return dir
}

// WriteFiles writes each file (a slash path under dir) with its directories.
func WriteFiles[T string | []byte](t testing.TB, dir string, files map[string]T) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// Command is a `gpupolicy-fn` subcommand's command line, as fn/cli dispatches it.
type Command func(ctx context.Context, args []string, stdout, stderr io.Writer) int

// Run runs a subcommand's command line in process and returns its exit code and what it wrote.
func Run(cmd Command, args ...string) (code int, stdout, stderr string) {
	return Call(cmd, args)
}

// Call runs an entry point that takes typed options (audit.Run, diff.Run, doctor.Run) in
// process and returns its exit code and what it wrote.
func Call[O any](run func(ctx context.Context, opts O, stdout, stderr io.Writer) int, opts O) (code int, stdout, stderr string) {
	var out, errs bytes.Buffer
	code = run(context.Background(), opts, &out, &errs)
	return code, out.String(), errs.String()
}
