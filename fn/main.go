// Command gpupolicy-fn expands a GPUPolicy into rendered manifests: with no arguments it is a
// KRM function (kustomize, kpt); its subcommands render a tree, audit privileges, diff two
// policies and diagnose a cluster. This file only dispatches.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/gpupolicy/gpupolicy/fn/audit"
	"github.com/gpupolicy/gpupolicy/fn/cli"
	"github.com/gpupolicy/gpupolicy/fn/diff"
	"github.com/gpupolicy/gpupolicy/fn/doctor"
	"github.com/gpupolicy/gpupolicy/fn/krm"
	"github.com/gpupolicy/gpupolicy/fn/validate"
	"github.com/gpupolicy/gpupolicy/fn/version"
)

type command func(ctx context.Context, args []string, stdout, stderr io.Writer) int

var commands = map[string]command{
	"render": cli.Render,
	"audit":  audit.Run,
	"diff":   diff.Run,
	"doctor": doctor.Run,
}

// commandHelp lines for the usage text of the commands other packages implement.
var commandHelp = [][2]string{
	{"gpupolicy-fn audit -f POLICY|DIR", "the privilege report of every container (Markdown or JSON)"},
	{"gpupolicy-fn diff BASE HEAD", "what a change moves (images, privileges, gates, RBAC, containerd drop-in)"},
	{"gpupolicy-fn doctor ...", "diagnoses why GPU pods or nodes are not ready in a cluster"},
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		oneShotGC()
		return krm.Run(stdin, stdout, stderr, validate.Options{})
	}
	if args[0] == "render" {
		oneShotGC()
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		cli.Usage(stdout, commandHelp)
		return 0
	case "version", "--version":
		fmt.Fprintln(stdout, version.Version)
		return 0
	}
	if c, ok := commands[args[0]]; ok {
		return c(ctx, args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "gpupolicy-fn: unknown command %q\n\n", args[0])
	cli.Usage(stderr, commandHelp)
	return 2
}

// oneShotMemoryLimit bounds the heap of a one-shot call whose collector is off: a typical
// policy allocates a few MiB in all, a thousand node pools a few hundred.
const oneShotMemoryLimit = 64 << 20

// oneShotGC switches the garbage collector off up to oneShotMemoryLimit for the calls that
// render once and exit (the KRM function, render): their whole allocation for a typical
// policy fits far below it, and collecting it cost about a fifth of their CPU. Past the limit
// the runtime collects as usual, so large policies stay bounded. GOGC or GOMEMLIMIT in the
// environment win.
func oneShotGC() {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	debug.SetMemoryLimit(oneShotMemoryLimit)
	debug.SetGCPercent(-1)
}
