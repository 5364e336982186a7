// Package fnmain is the process around gpupolicy-fn's command line (fn/cli): signals and the
// garbage collector settings of the one-shot calls. Both mains are this one call: fn (the
// path kustomize examples, the Dockerfile and e2e build) and fn/cmd/gpupolicy-fn (so `go
// install .../fn/cmd/gpupolicy-fn@version` names the binary gpupolicy-fn).
package fnmain

import (
	"context"
	"math"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"syscall"

	"github.com/gpupolicy/gpupolicy/fn/cli"
)

// Main runs gpupolicy-fn with the process's arguments and standard streams and returns the
// exit code.
func Main() int {
	args := os.Args[1:]
	if len(args) == 0 {
		// The KRM call writes its output once, at the end, and leaves no file behind: a
		// signal may end it at once (the default action), with no handler goroutine and the
		// threads it takes (three of six) started in every call.
		oneShotGC()
		return cli.Main(context.Background(), args, os.Stdin, os.Stdout, os.Stderr)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// The first signal cancels ctx and the command winds down (render: "interrupted", the
	// output untouched); a second one then ends the process at once.
	context.AfterFunc(ctx, stop)
	if args[0] == "render" {
		oneShotGC()
	}
	code := cli.Main(ctx, args, os.Stdin, os.Stdout, os.Stderr)
	stop()
	return code
}

// oneShotHeap is the heap below which a one-shot call runs without the garbage collector: a
// typical policy allocates a few MiB in all, so it is never collected.
const oneShotHeap = 64 << 20

// oneShotGC switches the garbage collector off for the calls that render once and exit (the
// KRM function, render): their whole allocation for a typical policy fits far below
// oneShotHeap, and collecting it cost about a fifth of their CPU. Above it the memory limit
// makes the runtime collect, and after every collection retuneGC raises the limit to twice
// the live heap: the collector then runs as seldom as with GOGC=100 and never below
// oneShotHeap. (With a fixed limit, a live heap near it made the runtime collect again and
// again: 30,000 nodeSelector labels took 3.9 s, three times as long as with GOGC=100.) GOGC
// or GOMEMLIMIT in the environment win.
func oneShotGC() {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	debug.SetMemoryLimit(oneShotHeap)
	debug.SetGCPercent(-1)
	armRetuneGC()
}

// armRetuneGC has retuneGC run after the next collection: a finalizer runs once the first
// collection finds its object unreachable, and this one re-arms itself.
func armRetuneGC() {
	runtime.SetFinalizer(new([64]byte), func(*[64]byte) {
		retuneGC()
		armRetuneGC()
	})
}

// retuneGC sets the memory limit to twice the live heap, at least oneShotHeap.
func retuneGC() {
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(live)
	if live[0].Value.Kind() != metrics.KindUint64 {
		debug.SetGCPercent(100) // no such metric: the runtime's defaults
		debug.SetMemoryLimit(math.MaxInt64)
		return
	}
	debug.SetMemoryLimit(max(oneShotHeap, 2*int64(live[0].Value.Uint64())))
}
