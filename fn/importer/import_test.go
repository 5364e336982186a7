package importer_test

import (
	"bytes"
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpupolicy/gpupolicy/fn/cli"
	"github.com/gpupolicy/gpupolicy/fn/pipeline"
	"github.com/gpupolicy/gpupolicy/fn/validate"
	"github.com/gpupolicy/gpupolicy/internal/peer"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// operatorModule is the GPU Operator module's directory (its config/samples and chart), from
// the module cache the build already filled.
func operatorModule(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/NVIDIA/gpu-operator").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -m github.com/NVIDIA/gpu-operator: %v\n%s", err, out)
	}
	return strings.TrimSpace(string(out))
}

func runImport(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = cli.Main(context.Background(), append([]string{"import"}, args...), strings.NewReader(stdin), &o, &e)
	return code, o.String(), e.String()
}

// versions are the facts a ClusterPolicy alone cannot say, given as flags.
var versions = []string{"--kubernetes-version", "1.34", "--containerd-version", "2.1", "--driver-version", "580.95.05", "--cuda-version", "12.8"}

// Each case's policy and report are golden; the policy validates and renders (import checks
// that before it prints, and so does this test, through the same pipeline as render).
func TestImportGolden(t *testing.T) {
	op := operatorModule(t)
	for _, tc := range []struct {
		name string
		args []string
	}{
		// NVIDIA's own samples, with the versions they cannot say.
		{"sample-clusterpolicy", append([]string{"-f", filepath.Join(op, "config/samples/v1_clusterpolicy.yaml")}, versions...)},
		{"sample-nvidiadriver", append([]string{"-f", filepath.Join(op, "config/samples/nvidia_v1alpha1_nvidiadriver.yaml")}, versions...)},
		// A live cluster's objects: the versions come from the Nodes.
		{"preinstalled", []string{"-f", "testdata/preinstalled.yaml", "-f", "testdata/nodes.yaml"}},
		{"nvidiadriver", []string{"-f", "testdata/nvidiadriver.yaml", "-f", "testdata/nodes.yaml", "--name", "fleet-a", "--gitops", "flux"}},
	} {
		t.Run(tc.name, func(t *testing.T) { checkImport(t, tc.name, op, "", tc.args) })
	}
}

// The gpu-operator chart's default values, rendered by the real helm exactly as the README and
// import --help tell a user to, piped into import on stdin.
func TestImportChartDefaults(t *testing.T) {
	helm := peer.Helm(t)
	op := operatorModule(t)
	cmd := exec.Command(helm, "template", "gpu-operator", filepath.Join(op, "deployments", "gpu-operator"),
		"--namespace", "gpu-operator", "--show-only", "templates/clusterpolicy.yaml")
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_CONFIG_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir())
	var errb bytes.Buffer
	cmd.Stderr = &errb
	rendered, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, errb.String())
	}
	// The driver version is the chart's own (a container driver's image tag): no --driver-version.
	checkImport(t, "chart-defaults", op, string(rendered), []string{"-f", "-", "--kubernetes-version", "1.34", "--containerd-version", "2.1", "--cuda-version", "12.8"})
}

// checkImport runs import and compares its output with testdata/<name>.golden (module paths
// shown as <gpu-operator>); the policy must render, and a second run give the same bytes.
func checkImport(t *testing.T, name, op, stdin string, args []string) {
	t.Helper()
	code, stdout, stderr := runImport(t, stdin, args...)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	if _, objs, res := pipeline.Load([]byte(stdout), validate.Options{}); res.HasErrors() || len(objs) == 0 {
		t.Fatalf("the imported policy does not render:\n%s\n%s", res.Text("import"), stdout)
	}
	got := "# stdout\n" + stdout + "# stderr\n" + strings.ReplaceAll(stderr, op, "<gpu-operator>")
	golden := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test ./fn/importer -update)", err)
	}
	if got != string(want) {
		t.Errorf("import differs from %s (go test ./fn/importer -update rewrites it):\n%s", golden, got)
	}
	if _, again, _ := runImport(t, stdin, args...); again != stdout {
		t.Error("a second import differs")
	}
}

// Every refusal exits 1, prints nothing on stdout and names the file and field to fix.
func TestImportRefusals(t *testing.T) {
	cp := func(spec string) string {
		return "apiVersion: nvidia.com/v1\nkind: ClusterPolicy\nmetadata:\n  name: cp\nspec:\n" + spec
	}
	for _, tc := range []struct {
		name, stdin string
		args        []string
		want        []string
	}{
		{"unknown kind", "apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: nvidia-device-plugin-daemonset\n", nil,
			[]string{"<stdin> (document 1)", `DaemonSet "nvidia-device-plugin-daemonset"`, "is not an input of import"}},
		{"other API group", "apiVersion: nvidia.com/v2\nkind: ClusterPolicy\nmetadata:\n  name: cp\n", nil,
			[]string{"<stdin> (document 1)", `apiVersion "nvidia.com/v2"`}},
		{"unknown field", cp("  driver:\n    enabeld: true\n"), nil,
			[]string{"<stdin> (document 1)", "ClusterPolicy cp", `unknown field "enabeld"`}},
		{"wrong type", cp("  driver:\n    enabled: \"yes\"\n"), nil,
			[]string{"<stdin> (document 1)", "spec.driver.enabled", "bool"}},
		{"second document", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n---\n" + cp("  toolkit:\n    enabled: maybe\n"), nil,
			[]string{"<stdin> (document 2)", "spec.toolkit.enabled"}},
		{"helm values", "driver:\n  enabled: false\n", nil,
			[]string{"<stdin> (document 1) has no apiVersion and kind", "helm template gpu-operator nvidia/gpu-operator"}},
		{"crio", cp("") + "---\napiVersion: v1\nkind: Node\nmetadata:\n  name: gpu-c\n  labels:\n    nvidia.com/gpu.present: \"true\"\nstatus:\n  nodeInfo:\n    containerRuntimeVersion: cri-o://1.34.1\n", versions,
			[]string{"Node gpu-c runs cri-o://1.34.1", "containerd only"}},
		{"digest", cp("  driver:\n    version: sha256:0123\n"), versions[:6],
			[]string{"ClusterPolicy cp spec.driver.version is a digest", "--driver-version"}},
		{"no versions", cp("  driver:\n    enabled: false\n"), nil,
			[]string{"spec.kubernetesVersion: no GPU Node", "--kubernetes-version", "--containerd-version", "--driver-version", "--cuda-version"}},
		{"two ClusterPolicies", cp("") + "---\n" + strings.Replace(cp(""), "name: cp", "name: other", 1), versions,
			[]string{"2 ClusterPolicies", "one cluster at a time"}},
		{"does not validate", cp("  dcgmExporter:\n    serviceMonitor:\n      interval: 1h\n"), versions,
			[]string{"does not validate", "spec.exporter.interval", "came from ClusterPolicy cp spec.dcgmExporter.serviceMonitor.interval"}},
		{"not YAML", "a: [\n", nil, []string{"<stdin> (document 1): not YAML"}},
		{"nothing", "", nil, []string{"no ClusterPolicy and no NVIDIADriver"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runImport(t, tc.stdin, append([]string{"-f", "-"}, tc.args...)...)
			if code != 1 || stdout != "" {
				t.Fatalf("exit %d, stdout %q; want 1 and nothing\n%s", code, stdout, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
		})
	}
}
