// Command gpupolicy-fn expands a GPUPolicy into rendered manifests: with no arguments it is a
// KRM function (kustomize, kpt); its subcommands render a tree, audit privileges, diff two
// policies and diagnose a cluster. fn/internal/fnmain sets up the process; fn/cli is the
// command line.
//
// Its packages in the order data flows: fn/api/v1alpha1 (the GPUPolicy: types, defaults,
// strict decoding) → fn/pipeline (decode, default, fn/validate, render) → fn/render (every
// object; each stage's DaemonSets, rollout stage and gate from plugin/config's stage table) →
// fn/krm and fn/cli (out to kustomize or a directory, then git), with fn/audit and fn/diff for
// the pull request, and fn/doctor reading the cluster back by the same stage table.
package main

import (
	"os"

	"github.com/gpupolicy/gpupolicy/fn/internal/fnmain"
)

func main() { os.Exit(fnmain.Main()) }
