package migmanager

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gpupolicy/gpupolicy/plugin/agent/gate"
	"github.com/gpupolicy/gpupolicy/plugin/agent/nodeapi"
	"github.com/gpupolicy/gpupolicy/plugin/agent/stages"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

const nodeName = "gpu-1"

// layoutFile is a pool's rendered layouts (what gpupolicy-fn writes into gpu-mig-config).
const layoutFile = `version: v1
mig-configs:
  balanced:
  - devices: [0, 1, 2, 3]
    mig-enabled: true
    mig-devices: {"3g.20gb": 2}
  - devices: [4, 5, 6, 7]
    mig-enabled: true
    mig-devices: {"1g.5gb": 7}
  all-2g.10gb:
  - devices: all
    mig-enabled: true
    mig-devices: {"2g.10gb": 3}
`

type fixture struct {
	cs    *fake.Clientset
	mgr   *Manager
	gate  *gate.Reconciler
	clock time.Time
}

func newFixture(t *testing.T, labels map[string]string) *fixture {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "training.yaml"), []byte(layoutFile), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := &config.Agent{
		Stages: config.Stages{FeatureDiscovery: true, Exporter: true, MIG: true},
		NodePools: []config.AgentPool{{Name: "training", NodeSelector: map[string]string{"pool": "training"},
			MIG: &config.AgentMIG{Layout: "balanced", Layouts: []string{"all-2g.10gb", "balanced"}, ConfigFile: "training.yaml"}}},
	}
	labels["pool"] = "training"
	cs := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName, Labels: labels, ResourceVersion: "1"}})
	f := &fixture{cs: cs, clock: time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)}
	f.mgr = &Manager{Client: cs, Node: nodeName, Config: cfg, ConfigDir: dir, Lib: newMock(t), now: func() time.Time { return f.clock }}
	ready := gate.Static(true, "ok")
	// The production order and openings (config.Gates), with the driver and toolkit passing.
	checks := []gate.StageCheck{
		{Stage: "entry", Opens: config.GateLabels("", cfg.Stages)},
		{Stage: config.StageDriver, Opens: config.GateLabels(config.StageDriver, cfg.Stages), Check: ready},
		{Stage: config.StageToolkit, Opens: config.GateLabels(config.StageToolkit, cfg.Stages), Check: ready},
		{Stage: config.StageMIGManager, Opens: config.GateLabels(config.StageMIGManager, cfg.Stages), Check: stages.MIGCheck(cfg)},
	}
	f.gate = &gate.Reconciler{Client: cs, Node: nodeName, Checks: checks}
	return f
}

func (f *fixture) node(t *testing.T) *corev1.Node {
	t.Helper()
	n, err := f.cs.CoreV1().Nodes().Get(context.Background(), nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (f *fixture) mig(t *testing.T, want string) Outcome {
	t.Helper()
	out, err := f.mgr.Reconcile(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if out.State != want {
		t.Fatalf("MIG state %q (%s), want %q", out.State, out.Message, want)
	}
	if got := f.node(t).Labels[config.LabelMIGConfigState]; got != want {
		t.Fatalf("label %s=%q, want %q", config.LabelMIGConfigState, got, want)
	}
	return out
}

func (f *fixture) reconcileGate(t *testing.T) {
	t.Helper()
	if _, err := f.gate.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// gateLog is the gate label changes of every node patch so far, in order.
func (f *fixture) gateLog(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, a := range f.cs.Actions() {
		p, ok := a.(k8stesting.PatchAction)
		if !ok || a.GetResource().Resource != "nodes" || a.GetSubresource() != "" {
			continue
		}
		var body struct {
			Metadata struct {
				Labels map[string]*string `json:"labels"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(p.GetPatch(), &body); err != nil {
			t.Fatal(err)
		}
		for k, v := range body.Metadata.Labels {
			if !strings.HasPrefix(k, config.LabelDeployPrefix) {
				continue
			}
			if v == nil {
				out = append(out, "-"+strings.TrimPrefix(k, config.LabelDeployPrefix))
			} else {
				out = append(out, "+"+strings.TrimPrefix(k, config.LabelDeployPrefix))
			}
		}
	}
	return out
}

func (f *fixture) condition(t *testing.T) *corev1.NodeCondition {
	t.Helper()
	return nodeapi.FindCondition(f.node(t), config.ConditionGPUStackReady)
}

// A node of a MIG pool: the gate opens the MIG step before the device plugin, the step applies
// the pool's layout, the gate then opens the downstream gates. A person's label picks another
// layout: the gate closes the downstream gates (last first), the step repartitions, the gate
// reopens them in order. A second pass changes nothing.
func TestLayoutAppliedBetweenClosedGates(t *testing.T) {
	f := newFixture(t, map[string]string{})
	f.reconcileGate(t)
	if c := f.condition(t); c == nil || c.Reason != config.ReasonMIGPending {
		t.Fatalf("condition before the step ran: %+v", c)
	}
	if n := f.node(t); n.Labels[config.LabelDeployMIGManager] != "true" || n.Labels[config.LabelDeployDevicePlugin] != "" {
		t.Fatalf("gates before the layout is applied: %v", n.Labels)
	}
	out := f.mig(t, config.MIGStateSuccess)
	if len(out.Changed) != 8 {
		t.Errorf("repartitioned GPUs %v, want all 8", out.Changed)
	}
	if got, _ := readBack(t, f.mgr.Lib, 0); got["3g.20gb"] != 2 {
		t.Errorf("GPU 0: %v", got)
	}
	if got, _ := readBack(t, f.mgr.Lib, 4); got["1g.5gb"] != 7 {
		t.Errorf("GPU 4: %v", got)
	}
	f.reconcileGate(t)
	if c := f.condition(t); c == nil || c.Status != corev1.ConditionTrue {
		t.Fatalf("condition after the layout: %+v", c)
	}
	start := len(f.gateLog(t))

	// A person picks another declared layout.
	n := f.node(t)
	n.Labels[config.LabelMIGConfig] = "all-2g.10gb"
	if _, err := f.cs.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	pending := f.mig(t, config.MIGStatePending)
	if !strings.Contains(pending.Message, "waiting for the gate to close") {
		t.Errorf("pending message %q", pending.Message)
	}
	if got, _ := readBack(t, f.mgr.Lib, 0); got["3g.20gb"] != 2 {
		t.Fatalf("GPU 0 repartitioned while the gates were open: %v", got)
	}
	f.reconcileGate(t)
	f.mig(t, config.MIGStateSuccess)
	f.reconcileGate(t)
	got := f.gateLog(t)[start:]
	want := []string{"-dcgm-exporter", "-gpu-feature-discovery", "-device-plugin", "+device-plugin", "+gpu-feature-discovery", "+dcgm-exporter"}
	if !slices.Equal(got, want) {
		t.Errorf("gate changes %v, want %v (closed last first, reopened in order)", got, want)
	}
	if got, _ := readBack(t, f.mgr.Lib, 5); got["2g.10gb"] != 3 {
		t.Errorf("GPU 5 after the label: %v", got)
	}
	if a := f.node(t).Annotations[config.AnnotationMIGApplied]; a != "all-2g.10gb" {
		t.Errorf("applied annotation %q", a)
	}
	if again := f.mig(t, config.MIGStateSuccess); len(again.Changed) != 0 {
		t.Errorf("second pass repartitioned %v", again.Changed)
	}
}

// Pods holding a GPU keep the layout pending, named; past the timeout the state is failed
// with the reason, and the gates stay closed with it in the condition.
func TestHeldGPUsPendThenFail(t *testing.T) {
	f := newFixture(t, map[string]string{})
	f.mgr.Holders = func(context.Context) (Holders, error) { return Holders{3: {"ml/train-7"}}, nil }
	f.mgr.Timeout = time.Minute
	f.reconcileGate(t)
	out := f.mig(t, config.MIGStatePending)
	if !strings.Contains(out.Message, "GPU 3 by ml/train-7") {
		t.Errorf("pending message %q does not name the pod", out.Message)
	}
	if got, _ := readBack(t, f.mgr.Lib, 0); len(got) != 0 {
		t.Errorf("GPU 0 changed although the layout was refused: %v", got)
	}
	f.clock = f.clock.Add(2 * time.Minute)
	// A restarted step (nothing in memory) still knows when the change began.
	f.mgr = &Manager{Client: f.cs, Node: nodeName, Config: f.mgr.Config, ConfigDir: f.mgr.ConfigDir, Lib: f.mgr.Lib,
		Holders: f.mgr.Holders, Timeout: time.Minute, now: func() time.Time { return f.clock }}
	out = f.mig(t, config.MIGStateFailed)
	if !strings.Contains(out.Message, "still not applied after 2m0s") || !strings.Contains(out.Message, "ml/train-7") {
		t.Errorf("failed message %q", out.Message)
	}
	f.clock = f.clock.Add(time.Minute)
	if again := f.mig(t, config.MIGStateFailed); again.State != config.MIGStateFailed {
		t.Errorf("a failed change turned %s", again.State)
	}
	f.reconcileGate(t)
	c := f.condition(t)
	if c == nil || c.Reason != config.ReasonMIGConfigFailed || !strings.Contains(c.Message, "ml/train-7") {
		t.Errorf("condition %+v", c)
	}
	if f.node(t).Labels[config.LabelDeployDevicePlugin] != "" {
		t.Error("device-plugin gate open on a failed layout")
	}
	var reasons []string
	events, _ := f.cs.CoreV1().Events(nodeapi.EventNamespace).List(context.Background(), metav1.ListOptions{})
	for _, e := range events.Items {
		reasons = append(reasons, e.Reason)
	}
	if !slices.Contains(reasons, config.ReasonMIGConfigFailed) {
		t.Errorf("events %v lack %s", reasons, config.ReasonMIGConfigFailed)
	}
}

// A label naming an undeclared layout fails without touching a GPU.
func TestUndeclaredLayoutFails(t *testing.T) {
	f := newFixture(t, map[string]string{config.LabelMIGConfig: "all-7g"})
	out := f.mig(t, config.MIGStateFailed)
	if !strings.Contains(out.Message, "names no layout of pool training (declared: all-2g.10gb, balanced)") {
		t.Errorf("message %q", out.Message)
	}
	f.reconcileGate(t)
	if c := f.condition(t); c == nil || c.Reason != config.ReasonMIGConfigFailed {
		t.Errorf("condition %+v", c)
	}
}

// TestLayoutForAnotherModelChangesNoGPU: a pool whose layouts were checked for one model
// (gpuProduct) meets GPUs of another: state failed naming the pool's model and each GPU's, no
// GPU repartitioned; with the node's own model the layout is applied.
func TestLayoutForAnotherModelChangesNoGPU(t *testing.T) {
	f := newFixture(t, map[string]string{})
	f.mgr.Config.NodePools[0].MIG.GPUProduct = "NVIDIA-A100-SXM4-80GB" // the mock's GPUs are 40GB
	f.reconcileGate(t)
	out := f.mig(t, config.MIGStateFailed)
	for _, want := range []string{"layout balanced: the pool's layouts were checked for NVIDIA-A100-SXM4-80GB (its gpuProduct)",
		"GPUs 0, 1, 2, 3, 4, 5, 6, 7 are NVIDIA-A100-SXM4-40GB", "no GPU was changed", "nodeSelector on nvidia.com/gpu.product"} {
		if !strings.Contains(out.Message, want) {
			t.Errorf("message %q lacks %q", out.Message, want)
		}
	}
	if len(out.Changed) > 0 {
		t.Fatalf("GPUs %v repartitioned", out.Changed)
	}
	for i := range 8 {
		d, _ := f.mgr.Lib.DeviceGetHandleByIndex(i)
		if mode, _, _ := d.GetMigMode(); mode != 0 {
			t.Fatalf("GPU %d has MIG mode %d after a refused layout", i, mode)
		}
	}
	f.mgr.Config.NodePools[0].MIG.GPUProduct = "NVIDIA-A100-SXM4-40GB"
	if out := f.mig(t, config.MIGStateSuccess); len(out.Changed) != 8 {
		t.Fatalf("with the node's model: GPUs %v repartitioned, want all 8", out.Changed)
	}
}

// A node outside every MIG pool: the step does nothing, the gate opens as without MIG.
func TestNodeWithoutMIGPool(t *testing.T) {
	f := newFixture(t, map[string]string{})
	n := f.node(t)
	n.Labels["pool"] = "inference"
	if _, err := f.cs.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if out, err := f.mgr.Reconcile(context.Background()); err != nil || out.State != "" {
		t.Fatalf("%+v %v", out, err)
	}
	f.reconcileGate(t)
	if f.node(t).Labels[config.LabelDeployDevicePlugin] != "true" {
		t.Error("device-plugin gate closed on a node without MIG")
	}
}

// With CDI device names, success waits for the toolkit stage's CDI spec to name the new MIG
// devices; the step records them where the toolkit stage watches.
func TestSuccessWaitsForTheCDISpec(t *testing.T) {
	f := newFixture(t, map[string]string{})
	root := t.TempDir()
	f.mgr.HostRoot = root
	f.mgr.Config.Toolkit.CDI = true
	f.mgr.Config.NodePools[0].DevicePlugin.DeviceListStrategy = config.DeviceListCDICRI
	f.reconcileGate(t)
	out := f.mig(t, config.MIGStatePending)
	if !strings.Contains(out.Message, "waiting for the toolkit stage to regenerate the CDI spec") {
		t.Fatalf("message %q", out.Message)
	}
	b, err := os.ReadFile(filepath.Join(root, config.MIGAppliedFile))
	if err != nil {
		t.Fatal(err)
	}
	var rec applied
	if err := json.Unmarshal(b, &rec); err != nil || rec.Layout != "balanced" || len(rec.MIGDevices) != 4*2+4*7 {
		t.Fatalf("recorded %s (%v)", b, err)
	}
	var spec strings.Builder
	spec.WriteString("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n")
	for _, u := range rec.MIGDevices {
		spec.WriteString("- name: " + u + "\n  containerEdits: {env: [X=1]}\n")
	}
	if err := os.MkdirAll(filepath.Join(root, filepath.Dir(config.CDISpecFile)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, config.CDISpecFile), []byte(spec.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	f.mig(t, config.MIGStateSuccess)
}
