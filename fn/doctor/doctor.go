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
// The diagnosis (Diagnose) is pure over a Cluster; Run only loads the kubeconfig and prints
// (fn/cli parses the flags into Options). Everything is read-only.
package doctor

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"time"

	"github.com/gpupolicy/gpupolicy/fn/internal/kubeclient"
)

// requestTimeout bounds each API call so an unreachable cluster fails in seconds, not minutes.
const requestTimeout = 15 * time.Second

// Exit codes.
const (
	ExitOK       = 0 // nothing wrong found
	ExitProblems = 1 // at least one finding of severity error
	ExitFailed   = 2 // bad flags or options, unreadable -f, cluster unreachable or a forbidden essential read
)

// Options are what `gpupolicy-fn doctor` is asked for; fn/cli fills them from its flags.
type Options struct {
	// Policy is a GPUPolicy file, or a directory/file of its rendered objects; when set, the
	// diagnosis uses the policy's facts and reports rendered objects missing or changed.
	Policy string
	// Kubeconfig and Context select the cluster as kubectl does; empty: $KUBECONFIG, then
	// ~/.kube/config, then the in-cluster service account, with the current context.
	Kubeconfig, Context string
	// Namespace of the rendered objects, where the agent ConfigMap is read from when Policy
	// is empty ("" = v1alpha1.DefaultNamespace).
	Namespace string
	// Node and Pod (NAMESPACE/NAME) narrow the report; empty: every GPU node and GPU pod.
	Node, Pod string
	// Format is "table" (also when empty) or "json".
	Format string
}

// Run diagnoses the cluster o names and writes the report to stdout; the exit code is ExitOK,
// ExitProblems or ExitFailed (bad options, cluster unreachable, a forbidden essential read).
func Run(ctx context.Context, o Options, stdout, stderr io.Writer) int {
	fail := func(err error) int {
		fmt.Fprintf(stderr, "gpupolicy-fn doctor: %v\n", err)
		return ExitFailed
	}
	o.Format = cmp.Or(o.Format, "table")
	if o.Format != "table" && o.Format != "json" {
		return fail(fmt.Errorf("-o %q: want table or json", o.Format))
	}
	if o.Pod != "" {
		if _, _, err := splitPodRef(o.Pod); err != nil {
			return fail(err)
		}
	}

	in, err := clusterInput(o.Kubeconfig, o.Context)
	if err != nil {
		return fail(err)
	}
	in.Namespace, in.Node, in.Pod = o.Namespace, o.Node, o.Pod
	if o.Policy != "" {
		in.Expected = expectedFrom(o.Policy)
	}
	report, err := Diagnose(ctx, in)
	if err != nil {
		return fail(err)
	}
	if o.Format == "json" {
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
	cfg, err := kubeclient.Load(kubeconfig, kubeContext)
	if err != nil {
		return Input{}, fmt.Errorf("loading the kubeconfig: %w; pass --kubeconfig or set KUBECONFIG (or run inside the cluster)", err)
	}
	in, err := forConfig(cfg)
	if err != nil {
		return Input{}, fmt.Errorf("loading the kubeconfig: %w", err)
	}
	return in, nil
}
