package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/gpupolicy/gpupolicy/e2e/internal/fakenode"
	"github.com/gpupolicy/gpupolicy/plugin/agent/toolkit"
	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/exporter/podresources/podresourcestest"
)

// mockMIGState is gpumock.MIGStateEnv, the node's shared mock MIG state. Written out: this
// package does not link NVML (its test binary would then need every NVML symbol at start).
const mockMIGState = "GPUPOLICY_NVML_MOCK_MIG_STATE"

// migPolicy is a pool of the mock's model (A100 40GB) with two declared layouts.
const migPolicy = `apiVersion: gpupolicy.dev/v1alpha1
kind: GPUPolicy
metadata:
  name: mig-e2e
spec:
  kubernetesVersion: "1.34"
  driver: {version: "580.95.05"}
  cuda: {version: "12.8"}
  devicePlugin: {deviceListStrategy: envvar}
  nodePools:
  - name: training
    nodeSelector: {gpupolicy.dev/pool: mig-e2e}
    devicePlugin: {migStrategy: mixed}
    mig:
      gpuProduct: NVIDIA-A100-SXM4-40GB
      layout: balanced
      layouts:
        balanced:
        - devices: [0, 1, 2, 3]
          profiles: {"3g.20gb": 2}
        - devices: [4, 5, 6, 7]
          profiles: {"1g.5gb": 7}
        all-2g.10gb:
        - devices: all
          profiles: {"2g.10gb": 3}
`

// migNode is one kwok node with the real `gpu-node-agent gate` and `gpu-node-agent mig`
// (against the dgxa100 mock, its MIG state in the node's host directory) run as the processes
// the rendered DaemonSets start, with the node agent's identity through the guardrails.
type migNode struct {
	name, root, kubeconfig, agentCfg, migDir, state, podResources string
	rendered                                                      string // the policy rendered
}

func (n *migNode) run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	base := []string{"--config", n.agentCfg, "--node", n.name, "--kubeconfig", n.kubeconfig}
	switch args[0] {
	case "mig":
		base = append(base, "--mig-config-dir", n.migDir, "--host-root", n.root, "--nvml-mock", "dgxa100", "--pod-resources-socket", n.podResources)
	case "labels":
		base = append(base, "--nvml-mock", "dgxa100")
	default:
		base = append(base, "--host-root", n.root)
	}
	cmd := exec.Command(filepath.Join(env.repoRoot, "bin", "gpu-node-agent"), append(args[:1], append(base, args[1:]...)...)...)
	cmd.Env = append(os.Environ(), mockMIGState+"="+n.state)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// step runs one pass of a program; wantOK says whether it must exit 0 (gate: every stage
// ready; mig: state success).
func (n *migNode) step(t *testing.T, prog string, wantOK bool) string {
	t.Helper()
	out, err := n.run(t, prog, "--once")
	var exit *exec.ExitError
	switch {
	case err != nil && !errors.As(err, &exit):
		t.Fatalf("%s: %v\n%s", prog, err, out)
	case wantOK && err != nil:
		t.Fatalf("%s --once failed: %v\n%s", prog, err, out)
	case !wantOK && err == nil:
		t.Fatalf("%s --once succeeded, want not ready:\n%s", prog, out)
	}
	if strings.Contains(out, `"level":"WARN"`) && strings.Contains(out, "forbidden") {
		t.Fatalf("%s was refused by the API server or its guardrails:\n%s", prog, out)
	}
	return out
}

func (n *migNode) labels(t *testing.T) map[string]string { return nodeLabels(t, n.name) }

// featureLabels runs the feature-discovery stage's program (`gpu-node-agent labels` against
// the same mock state) and returns the MIG device counts it labels, by profile.
func (n *migNode) featureLabels(t *testing.T) map[string]string {
	t.Helper()
	if out, err := n.run(t, "labels"); err != nil {
		t.Fatalf("labels: %v\n%s", err, out)
	}
	out := map[string]string{}
	for k, v := range n.labels(t) {
		if strings.HasPrefix(k, "nvidia.com/mig-") && strings.HasSuffix(k, ".count") {
			out[strings.TrimSuffix(strings.TrimPrefix(k, "nvidia.com/mig-"), ".count")] = v
		}
	}
	return out
}

// migDevices are the MIG devices the step recorded for the toolkit stage's CDI spec, GPU by
// GPU.
func (n *migNode) migDevices(t *testing.T) []string {
	t.Helper()
	var rec struct {
		MIGDevices []string `json:"migDevices"`
	}
	readObject(t, filepath.Join(n.root, config.MIGAppliedFile), &rec)
	return rec.MIGDevices
}

func newMIGNode(t *testing.T, d *deployment, name string, podResources string) *migNode {
	t.Helper()
	return newProgramNode(t, d, name, migPolicy, "mig-e2e", podResources)
}

// newProgramNode is a kwok node of the pool gpupolicy.dev/pool=<pool> of policy, whose node
// programs the test runs itself, with the rendered configs in place and the driver and toolkit
// stages done on its host directory.
func newProgramNode(t *testing.T, d *deployment, name, policyYAML, pool, podResources string) *migNode {
	t.Helper()
	dir := t.TempDir()
	rendered := filepath.Join(dir, "rendered")
	policy := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(policy, []byte(policyYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(filepath.Join(env.repoRoot, "bin", "gpupolicy-fn"), "render", "-f", policy, "-o", rendered).CombinedOutput(); err != nil {
		t.Fatalf("render: %v\n%s", err, out)
	}
	n := &migNode{name: name, root: filepath.Join(dir, "host"), migDir: filepath.Join(dir, "mig"), podResources: podResources, rendered: rendered}
	n.agentCfg = filepath.Join(dir, "agent.yaml")
	n.state = filepath.Join(n.root, "var/lib/gpupolicy/nvml-mock-mig.json")
	var agentCM, migCM corev1.ConfigMap
	readObject(t, filepath.Join(rendered, "00-prereqs", "configmap-"+config.AgentConfigMap+".yaml"), &agentCM)
	writeFile(t, n.agentCfg, agentCM.Data[config.AgentConfigFile])
	if migFile := filepath.Join(rendered, "00-prereqs", "configmap-"+config.MIGConfigMap+".yaml"); fileExists(migFile) {
		readObject(t, migFile, &migCM)
		for k, v := range migCM.Data {
			writeFile(t, filepath.Join(n.migDir, k), v)
		}
	}
	cfg, err := config.LoadAgent(n.agentCfg)
	if err != nil {
		t.Fatal(err)
	}
	// The host: the policy's driver loaded, the toolkit verified (what the earlier stages
	// leave behind), so the gate reaches the MIG step.
	writeFile(t, filepath.Join(n.root, "proc/driver/nvidia/version"),
		"NVRM version: NVIDIA UNIX x86_64 Kernel Module  "+cfg.Driver.Version+"  Tue Sep 30 00:00:00 UTC 2025\n")
	if err := toolkit.WriteStatus(n.root, toolkit.Status{Verified: true, Handlers: []string{cfg.Toolkit.RuntimeClassName},
		DropInSHA256: cfg.Toolkit.DropInSHA256, ContainerdVersion: cfg.ContainerRuntime.Version, VerifiedBy: "e2e", Time: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	n.kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := fakenode.WriteKubeconfig(n.kubeconfig, fakenode.AgentConfig(env.cfg, d.ns, d.agentDS.Spec.Template.Spec.ServiceAccountName, name)); err != nil {
		t.Fatal(err)
	}
	// Not a GPU node of the deployed stack (no nvidia.com/gpu.present): its DaemonSets and
	// the fleet's agents stay off; this test runs the node's programs itself.
	joinNode(t, fakenode.Spec{Name: name, Labels: map[string]string{"gpupolicy.dev/pool": pool}})
	return n
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func readObject(t *testing.T, path string, into any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestMIGLayoutAppliedByLabel: on a node of a MIG pool the gate opens the MIG step but not the
// device plugin; the step applies the pool's layout; the gate opens the device-plugin,
// feature-discovery and exporter gates; the device plugin lists the layout's MIG devices. A
// person's nvidia.com/mig.config picks another declared layout: the step waits for the gates
// to close, repartitions, and the gate reopens them; the device plugin lists the new devices.
// A GPU a pod holds is refused by name. Every write goes through the API server's guardrails
// with the node agent's identity.
func TestMIGLayoutAppliedByLabel(t *testing.T) {
	d := deployed(t)
	pr := podresourcestest.Start(t)
	n := newMIGNode(t, d, "mig-a", pr.Socket)

	n.step(t, "gate", false)
	l := n.labels(t)
	if l[config.LabelDeployMIGManager] != "true" || l[config.LabelDeployDevicePlugin] != "" {
		t.Fatalf("after the toolkit stage: %s", nvidiaLabels(t, n.name))
	}
	waitStackCondition(t, n.name, corev1.ConditionFalse, config.ReasonMIGPending)

	n.step(t, "mig", true)
	if got := n.featureLabels(t); got["3g.20gb"] != "8" || got["1g.5gb"] != "28" {
		t.Fatalf("feature labels %v after layout balanced", got)
	}
	if got := len(n.migDevices(t)); got != 36 {
		t.Fatalf("%d MIG devices recorded for the CDI spec, want 36", got)
	}
	n.step(t, "gate", true)
	for _, g := range []string{config.LabelDeployDevicePlugin, config.LabelDeployFeatureDiscovery, config.LabelDeployExporter} {
		if n.labels(t)[g] != "true" {
			t.Fatalf("%s closed after the layout was applied: %s", g, nvidiaLabels(t, n.name))
		}
	}
	waitStackCondition(t, n.name, corev1.ConditionTrue, config.ReasonStackReady)

	// A person picks the other declared layout.
	patch := []byte(`{"metadata":{"labels":{"` + config.LabelMIGConfig + `":"all-2g.10gb"}}}`)
	if _, err := env.cs.CoreV1().Nodes().Patch(context.Background(), n.name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// A pod holds a MIG device of GPU 0: nothing changes, and the state names the pod.
	uuid := n.migDevices(t)[0]
	pr.SetPods(podresourcestest.Pod{Namespace: "ml", Name: "train-0", Containers: []podresourcestest.Container{
		{Name: "c", Resource: "nvidia.com/mig-3g.20gb", DeviceIDs: []string{uuid}}}})
	n.step(t, "gate", false) // closes the downstream gates: the layout is not in place
	n.step(t, "mig", false)
	l = n.labels(t)
	if l[config.LabelMIGConfigState] != config.MIGStatePending {
		t.Fatalf("state %q with a held GPU", l[config.LabelMIGConfigState])
	}
	node, _ := env.cs.CoreV1().Nodes().Get(context.Background(), n.name, metav1.GetOptions{})
	if msg := node.Annotations[config.AnnotationMIGMessage]; !strings.Contains(msg, "GPU 0 by ml/train-0") {
		t.Fatalf("message %q does not name the pod", msg)
	}
	if got := n.migDevices(t); got[0] != uuid {
		t.Fatalf("GPUs repartitioned under a pod: %v", got)
	}

	// The pod ends: the step repartitions, the gate reopens in order.
	pr.SetPods()
	n.step(t, "mig", true)
	if got := n.featureLabels(t); got["2g.10gb"] != "24" || got["3g.20gb"] != "" {
		t.Fatalf("feature labels %v after layout all-2g.10gb", got)
	}
	n.step(t, "gate", true)
	if l := n.labels(t); l[config.LabelDeployDevicePlugin] != "true" || l[config.LabelMIGConfigState] != config.MIGStateSuccess {
		t.Fatalf("after the new layout: %s", nvidiaLabels(t, n.name))
	}
	// A second pass changes nothing.
	if out := n.step(t, "mig", true); !strings.Contains(out, "is in place") {
		t.Errorf("second pass: %s", out)
	}
}
