package audit

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/gpupolicy/gpupolicy/fn/source"
	"github.com/gpupolicy/gpupolicy/fn/validate"
)

// Run is `gpupolicy-fn audit`: exit 0 with the report, 1 when the input is invalid, 2 on usage errors.
func Run(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("audit", flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("f", "", "a GPUPolicy file (rendered first), a directory written by `gpupolicy-fn render -o`, or a multi-document YAML file of rendered objects (required)")
	format := fs.String("o", "md", "output format: md (Markdown for reviewers) or json (for tools)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: gpupolicy-fn audit -f POLICY|DIR|FILE [-o md|json]\n\n"+
			"Prints the privilege report of the rendered GPU stack: per container privileged, host\n"+
			"namespaces, host paths (read-only or read-write), capabilities, runtime class, the RBAC\n"+
			"rules of its service account and the host files it writes.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *file == "" || fs.NArg() > 0 || (*format != "md" && *format != "json") {
		fs.Usage()
		return 2
	}
	in, err := source.Load(*file, validate.Options{})
	if err != nil {
		fmt.Fprintf(stderr, "audit: %v\n", err)
		return 1
	}
	for _, r := range in.Results {
		if r.Severity != validate.SeverityInfo { // infos are for render's output, not the report
			fmt.Fprint(stderr, validate.Results{r}.Text(*file))
		}
	}
	r, err := Build(in.Objects)
	if err != nil {
		fmt.Fprintf(stderr, "audit: %s: %v\n", *file, err)
		return 1
	}
	out := r.Markdown()
	if *format == "json" {
		out = r.JSON()
	}
	if _, err := stdout.Write(out); err != nil {
		fmt.Fprintf(stderr, "audit: %v\n", err)
		return 1
	}
	return 0
}
