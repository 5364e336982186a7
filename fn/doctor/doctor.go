// Package doctor implements `gpupolicy-fn doctor`: it reads the live cluster and explains why a
// GPU node or a GPU pod is not ready, naming the first gate that fails and the one fix to try.
//
// A GPU pod must pass two different gates that are easily confused: the nvidia.com/gpu resource
// (the device plugin on the node advertised it) and the runtime handler behind its
// runtimeClassName (containerd on the node has it; the RuntimeClass's scheduling selector keeps
// the pod off nodes without it). Both depend on the node-label gates the node agent opens stage by
// stage, and on the agent's recorded reasons. Doctor reads those, the nodes' capacity, the
// RuntimeClass, the pods and their events, and, with -f, compares the rendered objects with the
// cluster.
//
// The diagnosis (Diagnose) is pure over a Cluster; Run only loads the kubeconfig and prints.
// Everything is read-only.
package doctor

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
)

// requestTimeout bounds each API call so an unreachable cluster fails in seconds, not minutes.
const requestTimeout = 15 * time.Second

// Exit codes.
const (
	ExitOK       = 0 // nothing wrong found
	ExitProblems = 1 // at least one finding of severity error
	ExitFailed   = 2 // bad flags, unreadable -f, cluster unreachable or a forbidden essential read
)

// Run is `gpupolicy-fn doctor`.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("doctor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	policy := fs.String("f", "", "GPUPolicy file, or a directory/file of its rendered objects (gpupolicy-fn render -o DIR); the diagnosis then uses the policy's facts and reports rendered objects missing or changed in the cluster")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then the in-cluster service account)")
	kubeContext := fs.String("context", "", "kubeconfig context to use (default: the current context)")
	namespace := fs.String("namespace", v1alpha1.DefaultNamespace, "namespace of the rendered objects, where the gpu-node-agent ConfigMap is read from when -f is not given")
	node := fs.String("node", "", "report only this node (and the GPU pods bound to it)")
	pod := fs.String("pod", "", "report only this pod, NAMESPACE/NAME, even if it is running")
	output := fs.String("o", "table", "output format: table or json")
	fs.Usage = func() {
		fmt.Fprintf(stderr, `Usage: gpupolicy-fn doctor [-f POLICY|DIR] [--kubeconfig FILE] [--context NAME] [--node N] [--pod NS/NAME] [-o table|json]

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
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitFailed
	}
	fail := func(err error) int {
		fmt.Fprintf(stderr, "gpupolicy-fn doctor: %v\n", err)
		return ExitFailed
	}
	if fs.NArg() > 0 {
		return fail(fmt.Errorf("unexpected argument %q; see --help", fs.Arg(0)))
	}
	if *output != "table" && *output != "json" {
		return fail(fmt.Errorf("-o %q: want table or json", *output))
	}
	if *pod != "" {
		if _, _, err := splitPodRef(*pod); err != nil {
			return fail(err)
		}
	}

	in, err := clusterInput(*kubeconfig, *kubeContext)
	if err != nil {
		return fail(err)
	}
	in.Namespace, in.Node, in.Pod = *namespace, *node, *pod
	if *policy != "" {
		in.Expected = expectedFrom(*policy)
	}
	report, err := Diagnose(ctx, in)
	if err != nil {
		return fail(err)
	}
	if *output == "json" {
		err = writeJSON(stdout, report)
	} else {
		err = writeTable(stdout, report)
	}
	if err != nil {
		return fail(err)
	}
	if report.Errors() > 0 {
		return ExitProblems
	}
	return ExitOK
}

// clusterInput loads the client configuration the way kubectl does: --kubeconfig, else
// $KUBECONFIG, else ~/.kube/config, else the in-cluster service account.
func clusterInput(kubeconfig, kubeContext string) (Input, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: kubeContext}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides).ClientConfig()
	if err != nil {
		return Input{}, fmt.Errorf("loading the kubeconfig: %w; pass --kubeconfig or set KUBECONFIG (or run inside the cluster)", err)
	}
	cfg.Timeout = requestTimeout
	cfg.UserAgent = "gpupolicy-fn-doctor"
	return forConfig(cfg)
}
