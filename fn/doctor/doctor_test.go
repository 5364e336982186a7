package doctor

import (
	"bytes"
	"context"
	"flag"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpupolicy/gpupolicy/fn/doctor/doctortest"
	"github.com/gpupolicy/gpupolicy/fn/testing/goldentree"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// The adapter the tests diagnose through must stay a Cluster (doctortest cannot assert it
// without importing doctor).
var (
	_ Cluster = (*doctortest.Clientset)(nil)
	_ Objects = (*doctortest.Dynamic)(nil)
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// checkGolden compares got with testdata/name, or rewrites it with -update.
func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	goldentree.File(t, filepath.Join("testdata", name), got, *update)
}

// diagnoseCase runs a diagnosis over a fake clientset and checks both renderings against goldens.
func diagnoseCase(t *testing.T, name string, in Input, objs []runtime.Object) *Report {
	t.Helper()
	if in.Cluster == nil {
		in.Cluster = doctortest.FromClientset(fake.NewClientset(objs...))
	}
	r, err := Diagnose(context.Background(), in)
	if err != nil {
		t.Fatalf("Diagnose: %v", err)
	}
	var table, js bytes.Buffer
	if err := writeTable(&table, r); err != nil {
		t.Fatal(err)
	}
	if err := writeJSON(&js, r); err != nil {
		t.Fatal(err)
	}
	checkGolden(t, name+".table", table.Bytes())
	checkGolden(t, name+".json", js.Bytes())
	return r
}

func nodeByName(t *testing.T, r *Report, name string) NodeReport {
	t.Helper()
	for _, n := range r.Nodes {
		if n.Name == name {
			return n
		}
	}
	t.Fatalf("node %s not in the report (%d nodes)", name, len(r.Nodes))
	return NodeReport{}
}

func hasFinding(fs []Finding, severity, check string) bool {
	for _, f := range fs {
		if f.Severity == severity && f.Check == check {
			return true
		}
	}
	return false
}

// TestNodeDiagnoses: one case per node diagnosis, each a healthy node with one thing wrong.
func TestNodeDiagnoses(t *testing.T) {
	cases := []struct {
		name    string
		node    *corev1.Node
		extra   []runtime.Object
		check   string // the first error's check; "" for a ready node
		warning string // a warning finding that must be present
		gate    string // the gate state of the device plugin
	}{
		{name: "node-healthy", node: gpuNode("gpu-a"), gate: GateStateOpen},
		{name: "node-toolkit-gate-closed", node: gpuNode("gpu-a", toolkitBroken), check: "gate", gate: GateStateClosed},
		{name: "node-driver-drift", node: gpuNode("gpu-a", driverDrifted), check: "driver-drift", gate: GateStateClosed},
		{name: "node-no-device-plugin", node: gpuNode("gpu-a", withGPUs(0, 0)), check: "gpu-capacity", gate: GateStateOpen},
		{name: "node-unhealthy-gpus", node: gpuNode("gpu-a", withGPUs(8, 6)), warning: "gpu-capacity", gate: GateStateOpen},
		{name: "node-gpu-count-mismatch", node: gpuNode("gpu-a", withGPUs(7, 7)), warning: "gpu-count", gate: GateStateOpen},
		{name: "node-mig-mixed", node: migNode("gpu-a"), gate: GateStateOpen},
		{name: "node-opted-out", node: gpuNode("gpu-a", withLabel(config.LabelDeployDevicePlugin, "false"), withGPUs(0, 0)), warning: "opt-out", gate: GateStateOptedOut},
		{name: "node-not-ready", node: gpuNode("gpu-a", notReady), check: "node-not-ready", gate: GateStateOpen},
		{name: "node-not-admitted", node: gpuNode("gpu-a", withoutLabels(config.LabelDeployDriver, config.LabelDeployToolkit, config.LabelToolkitReady,
			config.LabelDeployDevicePlugin, config.LabelDeployFeatureDiscovery, config.LabelDeployExporter), withAnnotation(config.AnnotationGateStatus, ""), withGPUs(0, 0)),
			check: "gate", gate: GateStateClosed},
		{name: "node-runtimeclass-mismatch", node: gpuNode("gpu-a"),
			extra: objects(runtimeClass("nvidia", map[string]string{"nvidia.com/gpu.runtime": "nvidia"})), check: "runtimeclass", gate: GateStateOpen},
		{name: "node-gpu-operator", node: gpuNode("gpu-a", withLabel(config.LabelOperatorValidator, "true"), withLabel(config.LabelDeployPrefix+"dcgm", "true"),
			withStackCondition("False", config.ReasonGPUOperatorManaged, "the GPU Operator manages this node")), check: "gpu-operator", gate: GateStateOpen},
		{name: "node-gpu-operator-handed-over", node: gpuNode("gpu-a", withLabel(config.LabelOperatorValidator, "true"), withLabel(config.LabelOperatorOperands, "false")),
			warning: "gpu-operator-labels", gate: GateStateOpen},
		{name: "node-gpu-operator-adopted", node: gpuNode("gpu-a", withAnnotation(config.AnnotationAdoptedGates, config.LabelDeployDevicePlugin)),
			warning: "gpu-operator-adopted", gate: GateStateOpen},
		{name: "node-runtimeclass-unguarded", node: gpuNode("gpu-a", toolkitBroken),
			extra: objects(runtimeClass("nvidia", nil)), check: "gate", gate: GateStateClosed, warning: ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			objs := objects(tc.node, cpuNode("cpu-a"), agentConfigMap())
			if tc.extra == nil {
				objs = append(objs, policyRuntimeClass())
			}
			objs = append(objs, tc.extra...)
			r := diagnoseCase(t, tc.name, Input{}, objs)
			if len(r.Nodes) != 1 {
				t.Fatalf("want only the GPU node reported, got %d nodes", len(r.Nodes))
			}
			n := r.Nodes[0]
			first, ok := firstError(n.Findings)
			switch {
			case tc.check == "" && ok:
				t.Errorf("want a ready node, got %s: %s", first.Check, first.Message)
			case tc.check != "" && (!ok || first.Check != tc.check):
				t.Errorf("first error: want %s, got %+v", tc.check, n.Findings)
			}
			if tc.warning != "" && !hasFinding(n.Findings, SeverityWarning, tc.warning) {
				t.Errorf("want warning %s, got %+v", tc.warning, n.Findings)
			}
			if got := gateState(n.Gates, config.StageDevicePlugin); got != tc.gate {
				t.Errorf("device-plugin gate: want %s, got %s", tc.gate, got)
			}
		})
	}
}

// TestNodeGateReasons checks the agent's reason reaches the closed gate and the drift is seen
// both from the agent's label and from the policy's version.
func TestNodeGateReasons(t *testing.T) {
	r, err := Diagnose(context.Background(), Input{Cluster: doctortest.FromClientset(fake.NewClientset(
		gpuNode("gpu-a", toolkitBroken), gpuNode("gpu-b", withLabel(config.LabelDriverVersion, "575.51.03")), agentConfigMap(), policyRuntimeClass()))})
	if err != nil {
		t.Fatal(err)
	}
	a := nodeByName(t, r, "gpu-a")
	if g := a.Gates[2]; g.Label != config.LabelToolkitReady || g.State != GateStateClosed ||
		g.Reason != "container-toolkit: no toolkit status in /var/lib/gpupolicy/toolkit-status.json: containerd has not loaded the nvidia handler" {
		t.Errorf("toolkit-ready gate: %+v", g)
	}
	b := nodeByName(t, r, "gpu-b")
	if !b.Driver.Drift || b.Driver.Expected != testDriver || b.Driver.Enforce != "branch" {
		t.Errorf("575 vs 580 under enforce branch must be drift even without the agent's label: %+v", b.Driver)
	}
}

func TestDriverSatisfies(t *testing.T) {
	for _, tc := range []struct {
		found, want, enforce string
		ok                   bool
	}{
		{"580.95.05", "580.95.05", "exact", true},
		{"580.82.07", "580.95.05", "exact", false},
		{"580.82.07", "580.95.05", "branch", true},
		{"570.86.15", "580.95.05", "branch", false},
		{"570.86.15", "580.95.05", "none", false},
		{"580.95.05", "580.95.5", "exact", true}, // the agent's rule: versions compare as numbers
		{"5800.95.05", "580.95.05", "branch", false},
	} {
		if got := driverSatisfies(tc.found, tc.want, tc.enforce); got != tc.ok {
			t.Errorf("driverSatisfies(%s, %s, %s) = %v", tc.found, tc.want, tc.enforce, got)
		}
	}
}

// TestClosedReason follows the agent's rule: a label is open iff its check and every enabled
// check before it is ready, so a failed driver check explains every gate after it; with MIG,
// the MIG step's check is the one the downstream gates wait for.
func TestClosedReason(t *testing.T) {
	stages := config.Stages{FeatureDiscovery: true, Exporter: true}
	verdicts := map[string]stageVerdict{
		config.StageDriver:  {Ready: false, Reason: "no driver loaded"},
		config.StageToolkit: {Ready: false, Reason: "no toolkit status"},
	}
	gate := func(name string) config.Gate {
		g, ok := config.GateByName(name)
		if !ok {
			t.Fatalf("no gate %s", name)
		}
		return g
	}
	for _, d := range config.Gates {
		want, wantCheck := "driver: no driver loaded", config.StageDriver
		if d.Name == config.StageDriver {
			want, wantCheck = "", ""
		}
		if check, got := closedReason(d, stages, verdicts); got != want || check != wantCheck {
			t.Errorf("%s: closedReason = %q, %q, want %q, %q", d.Label, check, got, wantCheck, want)
		}
	}
	verdicts[config.StageDriver] = stageVerdict{Ready: true, Reason: "driver 580.95.05 loaded"}
	if check, got := closedReason(gate(config.StageDevicePlugin), stages, verdicts); got != "container-toolkit: no toolkit status" || check != config.StageToolkit {
		t.Errorf("device-plugin gate: %q %q", check, got)
	}
	if check, got := closedReason(gate(config.StageToolkit), stages, verdicts); got != "" || check != config.StageDriver {
		t.Errorf("the container-toolkit gate only depends on the driver check: %q %q", check, got)
	}
	stages.MIG = true
	verdicts[config.StageToolkit] = stageVerdict{Ready: true}
	verdicts[config.StageMIGManager] = stageVerdict{Ready: false, Reason: "MIG layout all-1g.5gb is being applied"}
	if check, got := closedReason(gate(config.StageDevicePlugin), stages, verdicts); check != config.StageMIGManager || got != "mig-manager: MIG layout all-1g.5gb is being applied" {
		t.Errorf("device-plugin gate under MIG: %q %q", check, got)
	}
	if check, got := closedReason(gate(config.StageMIGManager), stages, verdicts); check != config.StageToolkit || got != "" {
		t.Errorf("the MIG gate only depends on the toolkit check: %q %q", check, got)
	}
}

// TestKernelModulesDrift: a node whose loaded module is the other flavour than the policy asks
// for is diagnosed as that (not as a version drift, the version is right), with the fix, and
// the table shows the flavour next to the version.
func TestKernelModulesDrift(t *testing.T) {
	cm := agentConfigMap()
	cm.Data[config.AgentConfigFile] = strings.Replace(cm.Data[config.AgentConfigFile],
		`driver: {source: preinstalled, version: "580.95.05", enforce: branch}`,
		`driver: {source: preinstalled, version: "580.95.05", enforce: branch, kernelModules: open}`, 1)
	node := gpuNode("gpu-a",
		withoutLabels(config.LabelDeployToolkit, config.LabelToolkitReady, config.LabelDeployDevicePlugin, config.LabelDeployFeatureDiscovery, config.LabelDeployExporter),
		withLabel(config.LabelDriverDrift, "true"), withLabel(config.LabelDriverKernelModules, "proprietary"),
		withAnnotation(config.AnnotationDriverDrift, "expected 580.95.05 (enforce branch), found 580.95.05 (proprietary kernel module)"),
		withStackCondition("False", config.ReasonDriverDrift, "stage driver: drift: the proprietary kernel module is loaded, the policy asks for open (driver.kernelModuleType)"),
		withGPUs(0, 0))
	r := diagnoseCase(t, "node-kernel-modules-drift", Input{}, objects(node, cm, policyRuntimeClass()))
	n := nodeByName(t, r, "gpu-a")
	first, ok := firstError(n.Findings)
	if !ok || first.Check != "driver-kernel-modules" || !strings.Contains(first.Message, "the proprietary kernel module is loaded, the policy asks for open") || !strings.Contains(first.Fix, "KERNEL_MODULE_TYPE") {
		t.Fatalf("findings %+v", n.Findings)
	}
	if hasFinding(n.Findings, SeverityError, "driver-drift") {
		t.Errorf("the version is the policy's, yet a driver-drift finding: %+v", n.Findings)
	}
	if n.Driver.KernelModules != "proprietary" || n.Driver.WantModules != "open" {
		t.Errorf("driver state %+v", n.Driver)
	}
}

// TestMPSGateClosed: on a node of an MPS pool whose control daemon cannot serve it (its GPUs in
// MIG mode), the device plugin's gate is the one the MPS check keeps closed: doctor names it
// with the check's reason and the stage table's fix (the daemon's record and pod).
func TestMPSGateClosed(t *testing.T) {
	cm := agentConfigMap()
	cm.Data[config.AgentConfigFile] = strings.Replace(strings.Replace(cm.Data[config.AgentConfigFile],
		"stages: {featureDiscovery: true, exporter: true}", "stages: {featureDiscovery: true, exporter: true, mps: true}", 1),
		"sharing: {timeSlicing: {replicas: 1}}", "sharing: {timeSlicing: {replicas: 1}, mps: {replicas: 4}}", 1)
	reason := "the MPS control daemon cannot serve this node: GPU 3 (GPU-3) is in MIG mode: MPS does not share MIG devices"
	node := gpuNode("gpu-a",
		withoutLabels(config.LabelDeployDevicePlugin, config.LabelDeployFeatureDiscovery, config.LabelDeployExporter),
		withLabel(config.LabelDeployMPSControlDaemon, "true"),
		withAnnotation(config.AnnotationGateStatus, `{"driver":{"ready":true},"container-toolkit":{"ready":true},"mps-control-daemon":{"ready":false,"reason":"`+reason+`"}}`),
		withStackCondition("False", config.ReasonMPSNotReady, "stage mps-control-daemon: "+reason),
		withGPUs(0, 0))
	r := diagnoseCase(t, "node-mps-not-ready", Input{}, objects(node, cm, policyRuntimeClass()))
	n := nodeByName(t, r, "gpu-a")
	first, ok := firstError(n.Findings)
	if !ok || first.Check != "gate" || !strings.Contains(first.Message, config.LabelDeployDevicePlugin+" is closed") ||
		!strings.Contains(first.Message, "GPU 3 (GPU-3) is in MIG mode") || !strings.Contains(first.Fix, config.MPSStatusFileName) {
		t.Fatalf("findings %+v", n.Findings)
	}
}
