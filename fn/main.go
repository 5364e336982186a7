// Command gpupolicy-fn expands a GPUPolicy into rendered manifests: with no arguments it is a
// KRM function (kustomize, kpt); its subcommands render a tree, audit privileges, diff two
// policies and diagnose a cluster. fn/internal/fnmain sets up the process; fn/cli is the
// command line.
package main

import (
	"os"

	"github.com/gpupolicy/gpupolicy/fn/internal/fnmain"
)

func main() { os.Exit(fnmain.Main()) }
