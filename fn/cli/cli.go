// Package cli is gpupolicy-fn's command line: the dispatch, every subcommand's flags and help
// text, and the top-level usage. The subcommands' work lives in their packages (render,
// audit, diff, doctor), which take typed options; fn/main.go only sets up the process and
// calls Main.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/gpupolicy/gpupolicy/fn/krm"
	"github.com/gpupolicy/gpupolicy/fn/validate"
	"github.com/gpupolicy/gpupolicy/version"
)

// command is one subcommand's command line: its arguments after the name, and the exit code.
type command func(ctx context.Context, args []string, stdout, stderr io.Writer) int

var commands = map[string]command{
	"render": Render,
	"audit":  Audit,
	"diff":   Diff,
	"doctor": Doctor,
	"fleet":  Fleet,
}

// Main runs one gpupolicy-fn command line (without the program name) and returns the exit
// code: no arguments is the KRM function on stdin/stdout, else a subcommand.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		return krm.Run(stdin, stdout, stderr, validate.Options{})
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		Usage(stdout)
		return 0
	case "version", "--version":
		fmt.Fprintln(stdout, version.Version)
		return 0
	}
	if args[0] == "import" { // the one command that reads stdin
		return Import(ctx, args[1:], stdin, stdout, stderr)
	}
	if c, ok := commands[args[0]]; ok {
		return c(ctx, args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "gpupolicy-fn: unknown command %q\n\n", args[0])
	Usage(stderr)
	return 2
}

// parseFlags parses args into fs; done says the command ends here with exit (0 after
// --help, 2 after a bad flag, which the flag package has already reported).
func parseFlags(fs *flag.FlagSet, args []string) (exit int, done bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, true
		}
		return 2, true
	}
	return 0, false
}
