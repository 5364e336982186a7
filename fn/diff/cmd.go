package diff

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/gpupolicy/gpupolicy/fn/source"
	"github.com/gpupolicy/gpupolicy/fn/validate"
)

// Run is `gpupolicy-fn diff BASE HEAD`: exit 0, 1 when an input is invalid or a finding reaches
// --fail-on, 2 on usage errors.
func Run(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("diff", flag.ContinueOnError)
	fs.SetOutput(stderr)
	failOn := fs.String("fail-on", "error", "exit 1 when a finding has at least this severity: warning, error, or none")
	format := fs.String("o", "md", "output format: md (a pull request comment) or json")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: gpupolicy-fn diff [flags] BASE HEAD\n\n"+
			"BASE and HEAD are each a GPUPolicy file, a directory written by `gpupolicy-fn render -o`,\n"+
			"or a multi-document YAML file of rendered objects. Prints what the change moves: versions,\n"+
			"objects, images per container, privileges, gates and node selectors, RBAC and the\n"+
			"containerd drop-in, and warns when one change moves more than one of driver, CUDA,\n"+
			"toolkit, gpupolicy image and kubernetesVersion (the upgrade window).\n\nFlags:\n")
		fs.PrintDefaults()
	}
	// Flags may follow the operands (`diff BASE HEAD --fail-on warning`): the flag package
	// stops at the first operand, so parse again after each one.
	var operands []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return 0
			}
			return 2
		}
		if fs.NArg() == 0 {
			break
		}
		operands = append(operands, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if len(operands) != 2 || (*failOn != "warning" && *failOn != "error" && *failOn != "none") || (*format != "md" && *format != "json") {
		fs.Usage()
		return 2
	}
	var inputs [2]*source.Input
	for i, path := range operands {
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
	if *format == "json" {
		out = r.JSON()
	}
	if _, err := stdout.Write(out); err != nil {
		fmt.Fprintf(stderr, "diff: %v\n", err)
		return 1
	}
	threshold := *failOn
	if threshold == "none" {
		threshold = ""
	}
	if r.Fails(threshold) {
		fmt.Fprintf(stderr, "diff: findings at or above %s: failing as --fail-on asks\n", *failOn)
		return 1
	}
	return 0
}
