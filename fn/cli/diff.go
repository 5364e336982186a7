package cli

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/gpupolicy/gpupolicy/fn/diff"
)

// Diff is `gpupolicy-fn diff BASE HEAD`: exit 0, 1 when an input is invalid or a finding reaches
// --fail-on, 2 on usage errors.
func Diff(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("diff", flag.ContinueOnError)
	fs.SetOutput(stderr)
	failOn := fs.String("fail-on", "error", "exit 1 when a finding has at least this severity: warning, error, or none")
	format := fs.String("o", "md", "output format: md (a pull request comment) or json")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: gpupolicy-fn diff [flags] BASE HEAD\n\n"+
			"BASE and HEAD are each a GPUPolicy file, a directory written by `gpupolicy-fn render -o`,\n"+
			"or a multi-document YAML file of rendered objects. Prints what the change moves: a summary\n"+
			"line, every version (driver, CUDA, toolkit, containerd, Kubernetes, gitops, enforce,\n"+
			"gpupolicy image), per changed object the fields that moved and the DaemonSets whose pods\n"+
			"it restarts, images per container, privileges, gates and node selectors, RBAC and the\n"+
			"containerd drop-in, and warns when one change moves more than one of driver, CUDA,\n"+
			"toolkit, gpupolicy image and kubernetesVersion (the upgrade window).\n\nFlags:\n")
		fs.PrintDefaults()
	}
	operands, exit, done := parseReportFlags(fs, args, failOn, format)
	if done {
		return exit
	}
	return diff.Run(ctx, diff.Options{Base: operands[0], Head: operands[1], Format: *format, FailOn: *failOn}, stdout, stderr)
}

// parseReportFlags parses the flags and the two operands of a report command (diff, fleet
// diff). Flags may follow the operands (`diff BASE HEAD --fail-on warning`): the flag package
// stops at the first operand, so it parses again after each one. done says the command ends
// here with exit (usage errors print the command's usage).
func parseReportFlags(fs *flag.FlagSet, args []string, failOn, format *string) (operands []string, exit int, done bool) {
	if operands, exit, done = parseInterleaved(fs, args); done {
		return nil, exit, true
	}
	if len(operands) != 2 || (*failOn != "warning" && *failOn != "error" && *failOn != "none") || (*format != "md" && *format != "json") {
		fs.Usage()
		return nil, 2, true
	}
	return operands, 0, false
}

// parseInterleaved parses flags that may come before, between or after the operands, which it
// returns in order.
func parseInterleaved(fs *flag.FlagSet, args []string) (operands []string, exit int, done bool) {
	for {
		if exit, done := parseFlags(fs, args); done {
			return nil, exit, true
		}
		if fs.NArg() == 0 {
			return operands, 0, false
		}
		operands = append(operands, fs.Arg(0))
		args = fs.Args()[1:]
	}
}
