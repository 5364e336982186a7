package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpupolicy/gpupolicy/e2e/internal/fakenode"
	"github.com/gpupolicy/gpupolicy/fn/doctor"
	"github.com/gpupolicy/gpupolicy/fn/doctor/doctortest"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// TestDoctorDiagnosesGPUPod takes one GPU node and one GPU workload pinned to it through the
// states a GPU pod gets stuck in (toolkit gate closed, driver drifted, no device plugin), then
// to healthy, and last to a device plugin the kubelet lost; in each it checks that
// `gpupolicy-fn doctor` names the first gate the pod fails, the node's verdict and the fix, on
// the real control plane with the real agent writing the labels. Each state is first reached
// by watching the cluster itself (labels, pods, capacity), then diagnosed once, so a wrong
// diagnosis fails instead of being waited out.
//
// The harness's device-plugin pod makes its node advertise GPUs as soon as it runs, so "no
// device plugin" is the one a person makes: the admin opts the node out of the device-plugin
// stage with the gate label set to "false", which the agent never overwrites.
func TestDoctorDiagnosesGPUPod(t *testing.T) {
	d := deployed(t)
	cfg := d.fleet.Config()
	h := joinGPUNode(t, d, "doctor-gpu", nil, false)
	pod := createDoctorWorkload(t, cfg, h.Node, "doctor-train")
	ref := pod.Namespace + "/" + pod.Name
	res := cfg.DevicePlugin.ResourceName
	gpus := int64(fakenode.GPUsPerNode * max(1, cfg.DevicePlugin.Sharing.TimeSlicing.Replicas))

	// 1. Toolkit gate closed: the driver verified, the toolkit pod runs, but containerd has no
	// verified handler (no status file), so toolkit-ready stays closed and no GPU is advertised.
	if err := h.SetDriver(cfg.Driver.Version); err != nil {
		t.Fatal(err)
	}
	waitPods(t, d, config.LabelDeployToolkit, h.Node)
	waitNode(t, d, h.Node, "toolkit check recorded as failed", func(n *corev1.Node) bool {
		return n.Labels[config.LabelDriverVersion] == cfg.Driver.Version && !hasLabel(n, config.LabelToolkitReady) &&
			stageVerdict(n, config.StageToolkit) == "false"
	})
	waitStackCondition(t, h.Node, corev1.ConditionFalse, config.ReasonToolkitNotLoaded)
	r, code := runDoctor(t, d, h.Node, ref)
	if code != doctor.ExitProblems {
		t.Errorf("toolkit gate closed: doctor exit code %d, want %d", code, doctor.ExitProblems)
	}
	n, p := only(t, r)
	wantStackCondition(t, n, "False", config.ReasonToolkitNotLoaded)
	wantGate(t, n, "toolkit-ready", doctor.GateStateClosed, "container-toolkit: ")
	wantFirstError(t, n, "gate", config.LabelToolkitReady)
	wantPod(t, p, doctor.PodGateGPUResource, "on "+h.Node+": ", "gpu-container-toolkit", config.ToolkitStatusFile)
	if n.Driver.Drift {
		t.Errorf("toolkit gate closed: driver %+v reported as drift", n.Driver)
	}

	// 2. Drifted driver: another branch than the policy's is loaded; the agent closes the
	// toolkit gate and labels the drift.
	const drifted = "570.86.15"
	if err := h.SetDriver(drifted); err != nil {
		t.Fatal(err)
	}
	waitNode(t, d, h.Node, "drift labelled, toolkit gate closed", func(n *corev1.Node) bool {
		return n.Labels[config.LabelDriverVersion] == drifted && n.Labels[config.LabelDriverDrift] == "true" &&
			!hasLabel(n, config.LabelDeployToolkit) && stageVerdict(n, config.StageDriver) == "false"
	})
	waitStackCondition(t, h.Node, corev1.ConditionFalse, config.ReasonDriverDrift)
	n, p = diagnose(t, d, h.Node, ref)
	wantStackCondition(t, n, "False", config.ReasonDriverDrift)
	if !n.Driver.Drift || n.Driver.Version != drifted || n.Driver.Expected != cfg.Driver.Version {
		t.Errorf("drifted driver: driver state %+v, want drift from %s to %s", n.Driver, cfg.Driver.Version, drifted)
	}
	wantGate(t, n, config.StageToolkit, doctor.GateStateClosed, "driver: ")
	wantFirstError(t, n, "driver-drift", drifted)
	wantPod(t, p, doctor.PodGateGPUResource, "on "+h.Node+": ", "install driver "+cfg.Driver.Version+" on "+h.Node)

	// 3. No device plugin: the admin opted the node out of the device-plugin stage; driver
	// and toolkit are fine, every other gate opens, but nothing advertises the GPUs.
	setLabel(t, h.Node, config.LabelDeployDevicePlugin, config.GateOptOut)
	if err := h.SetDriver(cfg.Driver.Version); err != nil {
		t.Fatal(err)
	}
	if err := h.SetToolkit(true); err != nil {
		t.Fatal(err)
	}
	waitNode(t, d, h.Node, "toolkit ready with the device plugin opted out", func(n *corev1.Node) bool {
		return n.Labels[config.LabelToolkitReady] == config.GateOpen && n.Labels[config.LabelDeployDevicePlugin] == config.GateOptOut &&
			stageVerdict(n, config.StageToolkit) == "true" && allocatable(n, res) == 0
	})
	if p := stagePods(t, d, config.LabelDeployDevicePlugin, h.Node); len(p) > 0 {
		t.Fatalf("device-plugin pods on an opted-out node: %v", p)
	}
	waitStackCondition(t, h.Node, corev1.ConditionFalse, config.ReasonOptedOut)
	r, code = runDoctor(t, d, h.Node, ref)
	if code != doctor.ExitProblems {
		t.Errorf("no device plugin: doctor exit code %d, want %d", code, doctor.ExitProblems)
	}
	n, p = only(t, r)
	wantStackCondition(t, n, "False", config.ReasonOptedOut)
	wantGate(t, n, "toolkit-ready", doctor.GateStateOpen, "")
	wantGate(t, n, config.StageDevicePlugin, doctor.GateStateOptedOut, "")
	if f, ok := firstError(n.Findings); ok {
		t.Errorf("no device plugin: a person's opt-out is not a node error, got %s: %s", f.Check, f.Message)
	}
	if !hasWarning(n.Findings, "opt-out", config.LabelDeployDevicePlugin) {
		t.Errorf("no device plugin: no opt-out warning naming %s: %+v", config.LabelDeployDevicePlugin, n.Findings)
	}
	if n.GPUs.Capacity != 0 || n.GPUs.Allocatable != 0 {
		t.Errorf("no device plugin: GPUs %+v, want none advertised", n.GPUs)
	}
	wantPod(t, p, doctor.PodGateGPUResource, "on "+h.Node+": ", "kubectl label node "+h.Node+" "+config.LabelDeployDevicePlugin+"-")
	if want := h.Node + " advertises none [opt-out: gate " + config.LabelDeployDevicePlugin; !strings.Contains(p.Finding.Message, want) {
		t.Errorf("no device plugin: pod finding %q does not name the opt-out (%q)", p.Finding.Message, want)
	}

	// 4. Healthy: the admin lifts the opt-out, the agent reopens the gate, the device plugin
	// runs and advertises the GPUs, and the pod is scheduled and runs.
	removeLabel(t, h.Node, config.LabelDeployDevicePlugin)
	waitPods(t, d, config.LabelDeployDevicePlugin, h.Node)
	eventually(t, stageTimeout, "GPU workload running on "+h.Node, func() (bool, string) {
		p := getPod(t, pod)
		return p.Spec.NodeName == h.Node && p.Status.Phase == corev1.PodRunning, podState(p)
	})
	waitStackCondition(t, h.Node, corev1.ConditionTrue, config.ReasonStackReady)
	r, code = runDoctor(t, d, h.Node, ref)
	if code != doctor.ExitOK {
		t.Errorf("healthy: doctor exit code %d, want %d; report %+v", code, doctor.ExitOK, r)
	}
	n, p = only(t, r)
	wantStackCondition(t, n, "True", config.ReasonStackReady)
	if n.Verdict != "ready" || len(n.Findings) > 0 {
		t.Errorf("healthy: node verdict %q, findings %+v; want ready and none", n.Verdict, n.Findings)
	}
	for _, g := range n.Gates {
		if g.State != doctor.GateStateOpen && g.State != doctor.GateStateDisabled {
			t.Errorf("healthy: gate %s is %s", g.Label, g.State)
		}
	}
	want := doctor.GPUState{Resource: res, Found: n.GPUs.Found, Replicas: n.GPUs.Replicas, Capacity: gpus, Allocatable: gpus, InUse: 1}
	if n.GPUs != want {
		t.Errorf("healthy: GPUs %+v, want %+v", n.GPUs, want)
	}
	if p.FailedGate != doctor.PodGateNone || p.Finding.Severity != "" || p.Phase != string(corev1.PodRunning) || p.Node != h.Node {
		t.Errorf("healthy: pod %+v, want Running on %s with no failed gate", p, h.Node)
	}

	// 5. The device plugin runs but the kubelet lost its registration (allocatable drops to 0,
	// capacity stays, as when a plugin does not re-register after a kubelet restart): the gate
	// is open and a second GPU pod finds nothing to schedule on.
	patchStatus(t, h.Node, map[string]any{"capacity": map[string]string{res: fmt.Sprint(gpus)}, "allocatable": map[string]string{res: "0"}})
	second := createDoctorWorkload(t, cfg, h.Node, "doctor-second")
	eventually(t, stageTimeout, "second GPU workload unschedulable", func() (bool, string) {
		p := getPod(t, second)
		return unschedulable(p), podState(p)
	})
	n, p = diagnose(t, d, h.Node, second.Namespace+"/"+second.Name)
	wantGate(t, n, config.StageDevicePlugin, doctor.GateStateOpen, "")
	wantFirstError(t, n, "gpu-capacity", "no allocatable "+res)
	if n.GPUs.Capacity != gpus || n.GPUs.Allocatable != 0 || n.GPUs.InUse != 1 {
		t.Errorf("unregistered device plugin: GPUs %+v, want capacity %d, allocatable 0, 1 in use", n.GPUs, gpus)
	}
	wantPod(t, p, doctor.PodGateGPUResource, "on "+h.Node+": ", "gpu-device-plugin")
}

// createDoctorWorkload creates the pod a GPU user writes: one nvidia.com/gpu, the policy's
// runtime class, the GPU taint's toleration, pinned to node by hostname.
func createDoctorWorkload(t *testing.T, cfg *config.Agent, node, name string) *corev1.Pod {
	t.Helper()
	ns := workloadNamespace(t)
	rc := cfg.Toolkit.RuntimeClassName
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			RuntimeClassName: &rc,
			NodeSelector:     map[string]string{"kubernetes.io/hostname": node},
			Tolerations: []corev1.Toleration{{Key: cfg.DevicePlugin.ResourceName, Operator: corev1.TolerationOpExists,
				Effect: corev1.TaintEffectNoSchedule}},
			Containers: []corev1.Container{{Name: "cuda", Image: "nvcr.io/nvidia/cuda:12.8.0-base-ubuntu24.04", Command: []string{"nvidia-smi"},
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
					corev1.ResourceName(cfg.DevicePlugin.ResourceName): resourceapi.MustParse("1")}}}},
		},
	}
	p, err := env.cs.CoreV1().Pods(ns).Create(context.Background(), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.cs.CoreV1().Pods(ns).Delete(context.Background(), p.Name, metav1.DeleteOptions{})
	})
	return p
}

// diagnose is doctor's library entry point on the admin clientset (doctortest adapts it; Run,
// in runDoctor, reads over the binary's own REST client), narrowed to node and pod.
func diagnose(t *testing.T, d *deployment, node, pod string) (doctor.NodeReport, doctor.PodReport) {
	t.Helper()
	r, err := doctor.Diagnose(context.Background(), doctor.Input{Cluster: doctortest.FromClientset(env.cs), Namespace: d.ns, Node: node, Pod: pod})
	if err != nil {
		t.Fatalf("doctor: %v", err)
	}
	return only(t, r)
}

// runDoctor is what `gpupolicy-fn doctor -o json` runs (fn/cli only parses the flags into
// these options), with the suite's admin kubeconfig; it returns the decoded report and the
// exit code.
func runDoctor(t *testing.T, d *deployment, node, pod string) (*doctor.Report, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := doctor.Run(context.Background(), doctor.Options{Kubeconfig: env.cluster.Kubeconfig, Namespace: d.ns,
		Node: node, Pod: pod, Format: "json"}, &out, &errb)
	if errb.Len() > 0 || code == doctor.ExitFailed {
		t.Fatalf("doctor exited %d; stderr: %s", code, errb.String())
	}
	var r doctor.Report
	dec := json.NewDecoder(&out)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("doctor -o json: %v; output:\n%s", err, out.String())
	}
	if r.Expectations.Source != "configmap "+d.ns+"/"+config.AgentConfigMap {
		t.Errorf("doctor judged by %q, want the agent ConfigMap in %s", r.Expectations.Source, d.ns)
	}
	return &r, code
}

func only(t *testing.T, r *doctor.Report) (doctor.NodeReport, doctor.PodReport) {
	t.Helper()
	if len(r.Nodes) != 1 || len(r.Pods) != 1 {
		t.Fatalf("want exactly the node and the pod asked for, got %d nodes, %d pods: %+v", len(r.Nodes), len(r.Pods), r)
	}
	return r.Nodes[0], r.Pods[0]
}

func wantGate(t *testing.T, n doctor.NodeReport, stage, state, reasonPrefix string) {
	t.Helper()
	for _, g := range n.Gates {
		if g.Stage != stage {
			continue
		}
		if g.State != state || !strings.HasPrefix(g.Reason, reasonPrefix) || (reasonPrefix == "" && g.Reason != "") {
			t.Errorf("%s: gate %s is %s (reason %q), want %s with reason %q...", n.Name, g.Label, g.State, g.Reason, state, reasonPrefix)
		}
		return
	}
	t.Errorf("%s: no gate for stage %s in %+v", n.Name, stage, n.Gates)
}

// wantFirstError: the node's first error is check, its message names what, and the node's
// verdict is that error.
func wantFirstError(t *testing.T, n doctor.NodeReport, check, what string) {
	t.Helper()
	f, ok := firstError(n.Findings)
	if !ok || f.Check != check || !strings.Contains(f.Message, what) {
		t.Errorf("%s: first error %+v, want %s naming %q (findings %+v)", n.Name, f, check, what, n.Findings)
		return
	}
	if n.Verdict != f.Check+": "+f.Message {
		t.Errorf("%s: verdict %q is not its first error %q", n.Name, n.Verdict, f.Message)
	}
}

// wantPod: the pod's first failed gate is gate and its fix contains every fragment.
func wantPod(t *testing.T, p doctor.PodReport, gate string, fix ...string) {
	t.Helper()
	t.Logf("doctor on pod %s/%s: %s: %s; fix: %s", p.Namespace, p.Name, p.FailedGate, p.Finding.Message, p.Finding.Fix)
	if p.FailedGate != gate || p.Finding.Severity != doctor.SeverityError || p.Finding.Check != gate {
		t.Errorf("pod %s/%s: failed gate %q (%+v), want %q", p.Namespace, p.Name, p.FailedGate, p.Finding, gate)
	}
	for _, s := range fix {
		if !strings.Contains(p.Finding.Fix, s) {
			t.Errorf("pod %s/%s: fix %q lacks %q (why: %s)", p.Namespace, p.Name, p.Finding.Fix, s, p.Finding.Message)
		}
	}
}

func firstError(fs []doctor.Finding) (doctor.Finding, bool) {
	for _, f := range fs {
		if f.Severity == doctor.SeverityError {
			return f, true
		}
	}
	return doctor.Finding{}, false
}

func hasWarning(fs []doctor.Finding, check, what string) bool {
	for _, f := range fs {
		if f.Severity == doctor.SeverityWarning && f.Check == check && strings.Contains(f.Message, what) {
			return true
		}
	}
	return false
}

// waitNode waits until the node is in the state ok describes, failing at once if the node's
// agent logs a problem.
func waitNode(t *testing.T, d *deployment, node, what string, ok func(*corev1.Node) bool) {
	t.Helper()
	eventually(t, stageTimeout, node+": "+what, func() (bool, string) {
		failOnAgentProblems(t, d, node)
		n, err := env.cs.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return ok(n), fmt.Sprintf("%s %s=%s", nvidiaLabels(t, node), config.AnnotationGateStatus, n.Annotations[config.AnnotationGateStatus])
	})
}

// stageVerdict is "true" or "false" as the agent recorded stage in the gate-status annotation,
// "" when it recorded none.
func stageVerdict(n *corev1.Node, stage string) string {
	var s map[string]struct {
		Ready bool `json:"ready"`
	}
	if json.Unmarshal([]byte(n.Annotations[config.AnnotationGateStatus]), &s) != nil {
		return ""
	}
	v, ok := s[stage]
	if !ok {
		return ""
	}
	return fmt.Sprint(v.Ready)
}

func hasLabel(n *corev1.Node, key string) bool {
	_, ok := n.Labels[key]
	return ok
}

func allocatable(n *corev1.Node, res string) int64 {
	q := n.Status.Allocatable[corev1.ResourceName(res)]
	return q.Value()
}

// setLabel and removeLabel act as the cluster admin (not the agent).
func setLabel(t *testing.T, node, key, value string) {
	t.Helper()
	patchLabels(t, node, map[string]any{key: value})
}

func removeLabel(t *testing.T, node, key string) {
	t.Helper()
	patchLabels(t, node, map[string]any{key: nil})
}

func patchLabels(t *testing.T, node string, labels map[string]any) {
	t.Helper()
	patchNode(t, node, map[string]any{"metadata": map[string]any{"labels": labels}}, "")
}

// patchStatus plays the kubelet's node status update.
func patchStatus(t *testing.T, node string, status map[string]any) {
	t.Helper()
	patchNode(t, node, map[string]any{"status": status}, "status")
}

func patchNode(t *testing.T, node string, body map[string]any, subresource string) {
	t.Helper()
	patch, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	var sub []string
	if subresource != "" {
		sub = []string{subresource}
	}
	if _, err := env.cs.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, patch, metav1.PatchOptions{}, sub...); err != nil {
		t.Fatal(err)
	}
}

// wantStackCondition checks the GPUStackReady condition doctor read from the node.
func wantStackCondition(t *testing.T, n doctor.NodeReport, status, reason string) {
	t.Helper()
	if c := n.StackCondition; c == nil || c.Status != status || c.Reason != reason {
		t.Errorf("doctor: %s condition %+v, want %s %s", config.ConditionGPUStackReady, c, status, reason)
	}
}
