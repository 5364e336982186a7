// Command gpupolicy-fn expands a GPUPolicy into rendered manifests: with no arguments it is a
// KRM function (kustomize, kpt); its subcommands render a tree, audit privileges, diff two
// policies and diagnose a cluster. This file only sets up the process; fn/cli is the command
// line.
package main

import (
	"context"
	"math"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"syscall"

	"github.com/gpupolicy/gpupolicy/fn/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// The first signal cancels ctx and the command winds down (render: "interrupted", the
	// output untouched); a second one then ends the process at once.
	context.AfterFunc(ctx, stop)
	args := os.Args[1:]
	if len(args) == 0 || args[0] == "render" {
		oneShotGC()
	}
	code := cli.Main(ctx, args, os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// oneShotHeap is the heap below which a one-shot call runs without the garbage collector: a
// typical policy allocates a few MiB in all, so it is never collected.
const oneShotHeap = 64 << 20

// oneShotGC switches the garbage collector off for the calls that render once and exit (the
// KRM function, render): their whole allocation for a typical policy fits far below
// oneShotHeap, and collecting it cost about a fifth of their CPU. The first collection, which
// the memory limit triggers at oneShotHeap, turns the collector back to its defaults (GOGC
// 100, no limit): a large policy then costs time linear in its size. (With the limit kept,
// a live heap near it made the runtime collect again and again, and 30,000 labels took three
// times as long as with the defaults.) GOGC or GOMEMLIMIT in the environment win.
func oneShotGC() {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	debug.SetMemoryLimit(oneShotHeap)
	debug.SetGCPercent(-1)
	// A finalizer runs after the first collection that finds its object unreachable, i.e.
	// after the first collection of the process.
	runtime.SetFinalizer(new([64]byte), func(*[64]byte) {
		debug.SetGCPercent(100)
		debug.SetMemoryLimit(math.MaxInt64)
	})
}
