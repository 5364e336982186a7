package audit

import (
	"context"
	"fmt"
	"io"

	"github.com/gpupolicy/gpupolicy/fn/source"
	"github.com/gpupolicy/gpupolicy/fn/validate"
)

// Options are what `gpupolicy-fn audit` is asked for; fn/cli fills them from its flags.
type Options struct {
	// Path is a GPUPolicy file (rendered first), a directory written by `gpupolicy-fn render
	// -o`, or a multi-document YAML file of rendered objects.
	Path string
	// Format is "json" (for tools) or anything else for Markdown (for reviewers).
	Format string
}

// Run writes the privilege report of o.Path to stdout: exit 0 with the report, 1 when the
// input is invalid or unreadable. Problems with the input go to stderr.
func Run(_ context.Context, o Options, stdout, stderr io.Writer) int {
	in, err := source.Load(o.Path, validate.Options{})
	if err != nil {
		fmt.Fprintf(stderr, "audit: %v\n", err)
		return 1
	}
	for _, r := range in.Results {
		if r.Severity != validate.SeverityInfo { // infos are for render's output, not the report
			fmt.Fprint(stderr, validate.Results{r}.Text(o.Path))
		}
	}
	r, err := Build(in.Objects)
	if err != nil {
		fmt.Fprintf(stderr, "audit: %s: %v\n", o.Path, err)
		return 1
	}
	out := r.Markdown()
	if o.Format == "json" {
		out = r.JSON()
	}
	if _, err := stdout.Write(out); err != nil {
		fmt.Fprintf(stderr, "audit: %v\n", err)
		return 1
	}
	return 0
}
