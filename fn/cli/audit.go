package cli

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/gpupolicy/gpupolicy/fn/audit"
)

// Audit is `gpupolicy-fn audit`: exit 0 with the report, 1 when the input is invalid, 2 on usage errors.
func Audit(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("audit", flag.ContinueOnError)
	fs.SetOutput(stderr)
	file := fs.String("f", "", "`POLICY|DIR|FILE`: a GPUPolicy file (rendered first), a directory written by gpupolicy-fn render -o, or a multi-document YAML file of rendered objects (required)")
	format := fs.String("o", "md", "output format: md (Markdown for reviewers) or json (for tools)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: gpupolicy-fn audit -f POLICY|DIR|FILE [-o md|json]\n\n"+
			"Prints the privilege report of the rendered GPU stack: per container privileged, host\n"+
			"namespaces, host paths (read-only or read-write), capabilities, runtime class, the RBAC\n"+
			"rules of its service account and the host files it writes.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if exit, done := parseFlags(fs, args); done {
		return exit
	}
	if *file == "" || fs.NArg() > 0 || (*format != "md" && *format != "json") {
		fs.Usage()
		return 2
	}
	return audit.Run(ctx, audit.Options{Path: *file, Format: *format}, stdout, stderr)
}
