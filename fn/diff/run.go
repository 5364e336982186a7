package diff

import (
	"cmp"
	"context"
	"fmt"
	"io"

	"github.com/gpupolicy/gpupolicy/fn/source"
	"github.com/gpupolicy/gpupolicy/fn/validate"
)

// Options are what `gpupolicy-fn diff` is asked for; fn/cli fills them from its flags.
type Options struct {
	// Base and Head are each a GPUPolicy file, a directory written by `gpupolicy-fn render
	// -o`, or a multi-document YAML file of rendered objects.
	Base, Head string
	// Format is "json" or anything else for Markdown (a pull request comment).
	Format string
	// FailOn is the least severity of a finding that fails the run: "warning", "error" (also
	// when empty), or "none" (never).
	FailOn string
}

// Run writes what the change from o.Base to o.Head moves to stdout: exit 0, 1 when an input is
// invalid or a finding reaches o.FailOn.
func Run(_ context.Context, o Options, stdout, stderr io.Writer) int {
	var inputs [2]*source.Input
	for i, path := range []string{o.Base, o.Head} {
		in, err := source.Load(path, validate.Options{})
		if err != nil {
			fmt.Fprintf(stderr, "diff: %v\n", err)
			return 1
		}
		inputs[i] = in
	}
	r, err := Compare(inputs[0], inputs[1])
	if err != nil {
		fmt.Fprintf(stderr, "diff: %v\n", err)
		return 1
	}
	out := r.Markdown()
	if o.Format == "json" {
		out = r.JSON()
	}
	if _, err := stdout.Write(out); err != nil {
		fmt.Fprintf(stderr, "diff: %v\n", err)
		return 1
	}
	if r.Fails(Threshold(o.FailOn)) {
		fmt.Fprintf(stderr, "diff: findings at or above %s: failing as --fail-on asks\n", cmp.Or(o.FailOn, "error"))
		return 1
	}
	return 0
}
