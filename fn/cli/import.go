package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/fn/importer"
	"github.com/gpupolicy/gpupolicy/fn/pipeline"
	"github.com/gpupolicy/gpupolicy/fn/validate"
)

// files is a repeatable -f.
type files []string

func (f *files) String() string     { return strings.Join(*f, ",") }
func (f *files) Set(v string) error { *f = append(*f, v); return nil }

// Import is `gpupolicy-fn import -f FILE...`: exit 0 with the GPUPolicy on stdout and the
// fields without an equivalent on stderr, 1 when the input cannot be imported (nothing on
// stdout), 2 on usage errors.
func Import(_ context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("import", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var in files
	fs.Var(&in, "f", "`FILE` of GPU Operator objects (ClusterPolicy, NVIDIADriver, the Nodes, the device plugin's ConfigMap; multi-document or a `kubectl get -o yaml` List); - is stdin; repeatable (required)")
	var opts importer.Options
	fs.StringVar(&opts.Name, "name", "", "metadata.name of the GPUPolicy (default: the ClusterPolicy's name)")
	fs.StringVar(&opts.GitOps, "gitops", "", "spec.gitops of the GPUPolicy: argocd, flux or none (default argocd)")
	fs.StringVar(&opts.KubernetesVersion, "kubernetes-version", "", "spec.kubernetesVersion (default: the lowest kubelet minor of the GPU Nodes in the input)")
	fs.StringVar(&opts.ContainerdVersion, "containerd-version", "", "spec.containerRuntime.version (default: the lowest containerd minor of the GPU Nodes)")
	fs.StringVar(&opts.DriverVersion, "driver-version", "", "spec.driver.version for a preinstalled driver (default: the driver most GPU Nodes run, from gpu-feature-discovery's labels)")
	fs.StringVar(&opts.CUDAVersion, "cuda-version", "", "spec.cuda.version (default: the newest CUDA every GPU Node's driver supports)")
	fs.StringVar(&opts.DriverOS, "driver-os", "", "spec.driver.os, the driver image's OS suffix (default: from Node Feature Discovery's OS labels)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: gpupolicy-fn import -f FILE [-f FILE...] [flags]

Turns a cluster's GPU Operator configuration into a GPUPolicy to review and commit:

  kubectl get clusterpolicy,nvidiadriver,nodes -o yaml > operator.yaml
  kubectl get configmap -n gpu-operator <devicePlugin.config.name> -o yaml >> operator.yaml
  gpupolicy-fn import -f operator.yaml > gpupolicy.yaml

The objects are decoded with NVIDIA's own types (github.com/NVIDIA/gpu-operator), so an
unknown field or a wrong value is an error naming it. Every field the input sets is either
carried over (a comment on the output says from where) or listed on stderr with its path and
why gpupolicy has no equivalent. The versions a ClusterPolicy does not hold (Kubernetes,
containerd, a preinstalled driver, CUDA) come from the GPU Nodes' labels, or from the flags.
An NVIDIADriver with a nodeSelector becomes a node pool with its own driver; the device
plugin ConfigMap's entries other than the default become node pools selected by
nvidia.com/device-plugin.config.

Helm values of the gpu-operator chart: render them with the chart you run first,
  helm template gpu-operator nvidia/gpu-operator --version <v> -f values.yaml \
    --show-only templates/clusterpolicy.yaml | gpupolicy-fn import -f - -f nodes.yaml

The output is validated and rendered before it is printed: on any error nothing is printed
and the exit code is 1. Take the cluster over as the README says ("Coming from the GPU Operator").

Flags:
`)
		fs.PrintDefaults()
	}
	if exit, done := parseFlags(fs, args); done {
		return exit
	}
	if len(in) == 0 || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "import: at least one -f FILE and no other arguments (see import --help)")
		return 2
	}
	var input importer.Input
	for _, name := range in {
		if err := readInput(&input, name, stdin); err != nil {
			fmt.Fprintf(stderr, "import: %v\n", err)
			return 1
		}
	}
	if len(input.Values) > 0 {
		d := input.Values[0]
		fmt.Fprintf(stderr, "import: %s (document %d) has no apiVersion and kind: Helm values of the gpu-operator chart go through the chart's own template first: helm template gpu-operator nvidia/gpu-operator --version <the version you run> -f %s --show-only templates/clusterpolicy.yaml | gpupolicy-fn import -f -\n", d.File, d.Index, d.File)
		return 1
	}
	res, err := importer.Import(&input, opts)
	if err != nil {
		fmt.Fprintf(stderr, "import: the input cannot be imported:\n%s\n", indent(err.Error()))
		return 1
	}
	out, err := res.YAML()
	if err != nil {
		fmt.Fprintf(stderr, "import: %v\n", err)
		return 1
	}
	// The output must be a policy that renders: check it the way render does.
	if _, _, results := pipeline.Load(out, validate.Options{}); results.HasErrors() {
		fmt.Fprintf(stderr, "import: the imported policy does not validate; fix the input or pass the flag named:\n%s", results.Text("<imported policy>"))
		for _, r := range results {
			if src := res.Source(r.Field); r.Severity == validate.SeverityError && src != "" {
				fmt.Fprintf(stderr, "  %s came from %s\n", r.Field, src)
			}
		}
		return 1
	}
	importer.WriteReport(stderr, res.Unmapped)
	if _, err := stdout.Write(out); err != nil {
		fmt.Fprintf(stderr, "import: %v\n", err)
		return 1
	}
	return 0
}

func readInput(in *importer.Input, name string, stdin io.Reader) error {
	if name == "-" {
		return in.Read("<stdin>", stdin)
	}
	f, err := os.Open(name)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.Size() > v1alpha1.MaxPolicyBytes*64 {
		return fmt.Errorf("%s: %d bytes is more than import reads (%d)", name, st.Size(), v1alpha1.MaxPolicyBytes*64)
	}
	return in.Read(name, f)
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(s, "\n", "\n  ")
}
