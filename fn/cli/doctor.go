package cli

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/fn/doctor"
)

// Doctor is `gpupolicy-fn doctor`; its exit codes are doctor's (ExitOK, ExitProblems,
// ExitFailed).
func Doctor(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o doctor.Options
	fs.StringVar(&o.Policy, "f", "", "GPUPolicy file, or a directory/file of its rendered objects (gpupolicy-fn render -o DIR); the diagnosis then uses the policy's facts and reports rendered objects missing or changed in the cluster")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then the in-cluster service account)")
	fs.StringVar(&o.Context, "context", "", "kubeconfig context to use (default: the current context)")
	fs.StringVar(&o.Namespace, "namespace", v1alpha1.DefaultNamespace, "namespace of the rendered objects, where the gpu-node-agent ConfigMap is read from when -f is not given")
	fs.StringVar(&o.Node, "node", "", "report only this node (and the GPU pods bound to it)")
	fs.StringVar(&o.Pod, "pod", "", "report only this pod, NAMESPACE/NAME, even if it is running")
	fs.StringVar(&o.Format, "o", "table", "output format: table or json")
	fs.Usage = func() {
		fmt.Fprintf(stderr, `Usage: gpupolicy-fn doctor [-f POLICY|DIR] [--kubeconfig FILE] [--context NAME] [--namespace NS] [--node N] [--pod NS/NAME] [-o table|json]

Explains, from the live cluster, why a GPU node or a GPU pod is not ready: per GPU node the
stage gates (open, closed with the agent's reason, opted out), driver drift, nvidia.com/gpu
capacity vs GPUs found and whether the RuntimeClass selects the node; per pending or failing
GPU pod the first gate it fails and the one fix to try; with -f, rendered objects missing or
changed in the cluster. Read-only.

Exit status: 0 nothing wrong, 1 problems found, 2 doctor could not run.

Flags:
`)
		fs.PrintDefaults()
	}
	if exit, done := parseFlags(fs, args); done {
		return exit
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "gpupolicy-fn doctor: unexpected argument %q; see --help\n", fs.Arg(0))
		return doctor.ExitFailed
	}
	return doctor.Run(ctx, o, stdout, stderr)
}
