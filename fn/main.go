// Command gpupolicy-fn expands a GPUPolicy into rendered manifests: with no arguments it is a
// KRM function (kustomize, kpt); its subcommands render a tree, audit privileges, diff two
// policies and diagnose a cluster. This file only sets up the process; fn/cli is the command
// line.
package main

import (
	"context"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/gpupolicy/gpupolicy/fn/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	args := os.Args[1:]
	if len(args) == 0 || args[0] == "render" {
		oneShotGC()
	}
	code := cli.Main(ctx, args, os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
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
