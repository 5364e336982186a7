package cli

import (
	"fmt"
	"io"

	"github.com/gpupolicy/gpupolicy/version"
)

// commandHelp are the usage lines of the commands whose help is one line.
var commandHelp = [][2]string{
	{"gpupolicy-fn audit -f POLICY|DIR", "the privilege report of every container (Markdown or JSON)"},
	{"gpupolicy-fn diff BASE HEAD", "what a change moves (images, privileges, gates, RBAC, containerd drop-in)"},
	{"gpupolicy-fn doctor ...", "diagnoses why GPU pods or nodes are not ready in a cluster"},
	{"gpupolicy-fn fleet render DIR", "every cluster's overlay of a fleet rendered in one process"},
	{"gpupolicy-fn fleet diff OLD NEW", "the blast radius of a change across many clusters' rendered output"},
	{"gpupolicy-fn fleet push OUT URL", "each cluster's tree as an OCI artifact in Flux's format, for OCIRepository"},
	{"gpupolicy-fn import -f FILE...", "a GPUPolicy from a GPU Operator's ClusterPolicy, NVIDIADrivers and Nodes"},
}

// Usage is the manual of gpupolicy-fn as a whole.
func Usage(w io.Writer) {
	fmt.Fprintf(w, `gpupolicy-fn %s — expands one GPUPolicy into every object a GPU cluster needs.

Usage:
  gpupolicy-fn                       KRM function: reads a ResourceList on stdin, writes it to stdout
                                     with the rendered objects added (the GPUPolicy is the
                                     functionConfig or an item and never appears in the output).
                                     Problems are results with severity, field path, resourceRef and
                                     file; any error exits 1 with no objects.
  gpupolicy-fn render -f POLICY -o DIR
                                     writes the rendered tree, one file per object, grouped by stage.
`, version.Version)
	for _, c := range commandHelp {
		fmt.Fprintf(w, "  %-35s%s\n", c[0], c[1])
	}
	fmt.Fprint(w, `  gpupolicy-fn version               prints the version
  gpupolicy-fn help                  this text; every command takes --help

As a kustomize generator (exec mode; the annotation goes on the GPUPolicy):
  metadata:
    annotations:
      config.kubernetes.io/function: |
        exec:
          path: /abs/path/to/gpupolicy-fn
  kustomization.yaml: generators: [policy.yaml]
  kustomize build --enable-alpha-plugins --enable-exec DIR

With kpt: kpt fn eval DIR --exec gpupolicy-fn --fn-config policy.yaml, with policy.yaml outside
DIR: the objects are written into DIR in the same stage directories as render -o (their
internal.config.kubernetes.io/path annotations). The function removes every GPUPolicy from its
output and kpt deletes the files of removed items, so a policy inside DIR would be deleted.
`)
}
