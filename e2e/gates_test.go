package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpupolicy/gpupolicy/e2e/internal/fakenode"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

const stageTimeout = time.Minute

// TestGatesOpenStageByStage follows two GPU nodes (one in the first node pool, one outside
// every pool) and one CPU node through the stages: each stage's pods appear on a node only
// after the agent verified the previous stage there, a workload that asks for the nvidia
// runtime waits for the toolkit gate, and a broken toolkit takes the device plugin off that
// node only.
func TestGatesOpenStageByStage(t *testing.T) {
	d := deployed(t)
	cfg := d.fleet.Config()
	pool := cfg.NodePools[0]
	a := joinGPUNode(t, d, "gates-pool", pool.NodeSelector, false)
	b := joinGPUNode(t, d, "gates-nopool", nil, false)
	joinNode(t, fakenode.Spec{Name: "gates-cpu"})
	agent := []*appsv1.DaemonSet{d.agentDS}

	// Entry: agents run on GPU nodes, open the driver gate, and the driver stage lands there.
	for _, n := range []string{a.Node, b.Node} {
		waitPods(t, d, config.LabelDeployDriver, n)
	}
	if p := podsOf(t, d, agent, "gates-cpu"); len(p) > 0 {
		t.Errorf("agent pods on the CPU node: %v", p)
	}
	for g := range d.stageDaemonSets {
		if p := stagePods(t, d, g, "gates-cpu"); len(p) > 0 {
			t.Errorf("stage %s pods on the CPU node: %v", g, p)
		}
	}
	// No driver loaded yet: the toolkit gate stays closed on both nodes.
	for _, n := range []string{a.Node, b.Node} {
		noPods(t, d, config.LabelDeployToolkit, n)
		if v, ok := nodeLabels(t, n)[config.LabelDeployToolkit]; ok {
			t.Errorf("%s: %s=%s before any driver loaded", n, config.LabelDeployToolkit, v)
		}
	}

	// The driver loads on a: its toolkit stage starts, b's does not.
	if err := a.SetDriver(cfg.Driver.Version); err != nil {
		t.Fatal(err)
	}
	waitPods(t, d, config.LabelDeployToolkit, a.Node)
	noPods(t, d, config.LabelDeployToolkit, b.Node)
	noPods(t, d, config.LabelDeployDevicePlugin, a.Node)
	if got := nodeLabels(t, a.Node)[config.LabelDriverVersion]; got != cfg.Driver.Version {
		t.Errorf("%s: %s=%q, want %q", a.Node, config.LabelDriverVersion, got, cfg.Driver.Version)
	}

	// The toolkit is verified on a: the device plugin of a's pool runs there.
	if err := a.SetToolkit(true); err != nil {
		t.Fatal(err)
	}
	waitPods(t, d, config.LabelDeployDevicePlugin, a.Node)
	checkDevicePluginOwner(t, d, a.Node, pool.NodeSelector)
	// The agent wrote its condition through nodes/status, past the guardrails: `kubectl
	// describe node` tells a's complete stack from b's missing driver.
	waitStackCondition(t, a.Node, corev1.ConditionTrue, config.ReasonStackReady)
	waitStackCondition(t, b.Node, corev1.ConditionFalse, config.ReasonDriverNotLoaded)

	// A workload with the nvidia runtime class pinned to b waits: b has no handler yet.
	wl := createRuntimeClassWorkload(t, cfg.Toolkit.RuntimeClassName, b.Node, "")
	eventually(t, stageTimeout, "workload unschedulable on "+b.Node, func() (bool, string) {
		p := getPod(t, wl)
		return unschedulable(p), podState(p)
	})
	if err := b.SetDriver(cfg.Driver.Version); err != nil {
		t.Fatal(err)
	}
	waitPods(t, d, config.LabelDeployToolkit, b.Node)
	if p := getPod(t, wl); p.Spec.NodeName != "" {
		t.Fatalf("workload scheduled to %s before its toolkit gate opened", p.Spec.NodeName)
	}
	if err := b.SetToolkit(true); err != nil {
		t.Fatal(err)
	}
	eventually(t, stageTimeout, "workload running on "+b.Node, func() (bool, string) {
		p := getPod(t, wl)
		return p.Spec.NodeName == b.Node && p.Status.Phase == corev1.PodRunning, podState(p)
	})
	waitPods(t, d, config.LabelDeployDevicePlugin, b.Node)
	checkDevicePluginOwner(t, d, b.Node, nil)
	// With the device plugin running, b advertises its GPUs and a pod asking for one runs.
	gpuPod := createRuntimeClassWorkload(t, cfg.Toolkit.RuntimeClassName, b.Node, cfg.DevicePlugin.ResourceName)
	eventually(t, stageTimeout, "GPU workload running on "+b.Node, func() (bool, string) {
		p := getPod(t, gpuPod)
		return p.Spec.NodeName == b.Node && p.Status.Phase == corev1.PodRunning, podState(p)
	})

	// The toolkit breaks on a (containerd lost the handler): the device plugin leaves a, the
	// earlier stages stay, and b is untouched.
	if err := a.SetToolkit(false); err != nil {
		t.Fatal(err)
	}
	// The agent closes the labels one patch each, last first: the DaemonSet controller may
	// remove the pod before the agent's next patch, so wait for both.
	eventually(t, stageTimeout, "device plugin and toolkit labels gone from "+a.Node, func() (bool, string) {
		p := stagePods(t, d, config.LabelDeployDevicePlugin, a.Node)
		labels := nodeLabels(t, a.Node)
		_, ready := labels[config.LabelToolkitReady]
		_, deploy := labels[config.LabelDeployDevicePlugin]
		return len(p) == 0 && !ready && !deploy, fmt.Sprint(p, " ", nvidiaLabels(t, a.Node))
	})
	waitStackCondition(t, a.Node, corev1.ConditionFalse, config.ReasonToolkitNotLoaded)
	for _, g := range []string{config.LabelDeployDriver, config.LabelDeployToolkit} {
		if p := stagePods(t, d, g, a.Node); !running(p) {
			t.Errorf("%s: stage %s pods %v, want them to stay running", a.Node, g, p)
		}
	}
	if p := stagePods(t, d, config.LabelDeployDevicePlugin, b.Node); !running(p) {
		t.Errorf("%s: device plugin %v, want it untouched", b.Node, p)
	}
	// Without its device plugin, a stops offering GPUs to new pods.
	res := corev1.ResourceName(cfg.DevicePlugin.ResourceName)
	eventually(t, stageTimeout, "no allocatable GPUs on "+a.Node, func() (bool, string) {
		n, err := env.cs.CoreV1().Nodes().Get(context.Background(), a.Node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		q := n.Status.Allocatable[res]
		return q.IsZero(), fmt.Sprintf("allocatable %s=%s", res, q.String())
	})
}

// waitStackCondition waits for the node's GPUStackReady condition to have status and reason,
// and checks that the kubelet's Ready condition survived the agent's status patches.
func waitStackCondition(t *testing.T, node string, status corev1.ConditionStatus, reason string) {
	t.Helper()
	eventually(t, stageTimeout, fmt.Sprintf("%s: %s=%s (%s)", node, config.ConditionGPUStackReady, status, reason), func() (bool, string) {
		n, err := env.cs.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		var stack, ready *corev1.NodeCondition
		for i, c := range n.Status.Conditions {
			switch c.Type {
			case config.ConditionGPUStackReady:
				stack = &n.Status.Conditions[i]
			case corev1.NodeReady:
				ready = &n.Status.Conditions[i]
			}
		}
		if ready == nil || ready.Status != corev1.ConditionTrue {
			return false, fmt.Sprintf("kubelet Ready condition %+v", ready)
		}
		return stack != nil && stack.Status == status && stack.Reason == reason, fmt.Sprintf("%+v", stack)
	})
}

func waitPods(t *testing.T, d *deployment, gate, node string) {
	t.Helper()
	eventually(t, stageTimeout, fmt.Sprintf("stage %s running on %s", gate, node), func() (bool, string) {
		failOnAgentProblems(t, d, node)
		p := stagePods(t, d, gate, node)
		return running(p), fmt.Sprint(p, " ", nvidiaLabels(t, node))
	})
}

// noPods asserts that a stage has no pod on node. It is checked right after another stage's
// pods appeared, i.e. after the DaemonSet controller and the agents had their turn.
func noPods(t *testing.T, d *deployment, gate, node string) {
	t.Helper()
	if p := stagePods(t, d, gate, node); len(p) > 0 {
		t.Errorf("stage %s pods on %s before its gate should open: %v (labels %s)", gate, node, p, nvidiaLabels(t, node))
	}
}

// checkDevicePluginOwner: the device-plugin pod on node belongs to the DaemonSet made for
// the node's pool (poolLabels) and to no other.
func checkDevicePluginOwner(t *testing.T, d *deployment, node string, poolLabels map[string]string) {
	t.Helper()
	for _, ds := range d.stageDaemonSets[config.LabelDeployDevicePlugin] {
		p := podsOf(t, d, []*appsv1.DaemonSet{ds}, node)
		if want := selects(ds, poolLabels); want != (len(p) == 1) {
			t.Errorf("%s (pool labels %v): DaemonSet %s has pods %v, want one: %v", node, poolLabels, ds.Name, p, want)
		}
	}
}

// createRuntimeClassWorkload creates a pod that asks for the runtime class (and one GPU of
// resource when it is not "") and is pinned to node by hostname; the RuntimeClass admission
// adds the class's scheduling selector.
func createRuntimeClassWorkload(t *testing.T, runtimeClass, node, resource string) *corev1.Pod {
	t.Helper()
	ns := workloadNamespace(t)
	name := "cuda-" + node
	if resource != "" {
		name = "gpu-" + node
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: corev1.PodSpec{
			RuntimeClassName: &runtimeClass,
			NodeSelector:     map[string]string{"kubernetes.io/hostname": node},
			Containers:       []corev1.Container{{Name: "cuda", Image: "nvcr.io/nvidia/cuda:12.8.0-base-ubuntu24.04", Command: []string{"nvidia-smi"}}},
		},
	}
	if resource != "" {
		one := resourceapi.MustParse("1")
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceName(resource): one}
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

// workloadNamespace is a namespace for test workloads, ready once its default
// ServiceAccount exists (pod admission needs it).
func workloadNamespace(t *testing.T) string {
	t.Helper()
	const ns = "e2e-workloads"
	ctx := context.Background()
	_, err := env.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !isAlreadyExists(err) {
		t.Fatal(err)
	}
	eventually(t, stageTimeout, "default ServiceAccount in "+ns, func() (bool, string) {
		_, err := env.cs.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
	return ns
}

func getPod(t *testing.T, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	got, err := env.cs.CoreV1().Pods(p.Namespace).Get(context.Background(), p.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func unschedulable(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return p.Spec.NodeName == ""
		}
	}
	return false
}

func podState(p *corev1.Pod) string {
	s := fmt.Sprintf("phase=%s node=%q nodeSelector=%v", p.Status.Phase, p.Spec.NodeName, p.Spec.NodeSelector)
	for _, c := range p.Status.Conditions {
		s += fmt.Sprintf(" %s=%s(%s: %s)", c.Type, c.Status, c.Reason, c.Message)
	}
	return s
}
