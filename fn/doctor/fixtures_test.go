package doctor

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// The fixtures build the cluster states the agent and device plugin produce, so each test case
// reads as "a healthy GPU node, except ...".

const (
	testDriver   = "580.95.05"
	gpuTaintKey  = "nvidia.com/gpu"
	healthyGates = `{"driver":{"ready":true,"reason":"driver 580.95.05 loaded"},"container-toolkit":{"ready":true,"reason":"containerd loaded handler nvidia (drop-in sha256 matches)"}}`
)

var epoch = metav1.NewTime(time.Date(2026, 11, 30, 20, 0, 0, 0, time.UTC))

type nodeOpt func(*corev1.Node)

// gpuNode is a healthy GPU node: every gate open, the policy's driver, 8 GPUs advertised.
func gpuNode(name string, opts ...nodeOpt) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			config.LabelGPUPresent:             "true",
			config.LabelDeployDriver:           "true",
			config.LabelDeployToolkit:          "true",
			config.LabelToolkitReady:           "true",
			config.LabelDeployDevicePlugin:     "true",
			config.LabelDeployFeatureDiscovery: "true",
			config.LabelDeployExporter:         "true",
			config.LabelDriverVersion:          testDriver,
			config.LabelGPUCount:               "8",
			"nvidia.com/gpu.product":           "NVIDIA-A100-SXM4-40GB",
		}, Annotations: map[string]string{config.AnnotationGateStatus: healthyGates}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}
	withGPUs(8, 8)(n)
	for _, o := range opts {
		o(n)
	}
	return n
}

// cpuNode is a node without GPUs; doctor must leave it out.
func cpuNode(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/os": "linux"}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
}

func withGPUs(capacity, allocatable int64) nodeOpt {
	return func(n *corev1.Node) {
		n.Status.Capacity = corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(capacity, resource.DecimalSI)}
		n.Status.Allocatable = corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(allocatable, resource.DecimalSI)}
	}
}

func withLabel(k, v string) nodeOpt { return func(n *corev1.Node) { n.Labels[k] = v } }

func withoutLabels(keys ...string) nodeOpt {
	return func(n *corev1.Node) {
		for _, k := range keys {
			delete(n.Labels, k)
		}
	}
}

func withAnnotation(k, v string) nodeOpt { return func(n *corev1.Node) { n.Annotations[k] = v } }

func withTaint(key, value string) nodeOpt {
	return func(n *corev1.Node) {
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: key, Value: value, Effect: corev1.TaintEffectNoSchedule})
	}
}

func notReady(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionFalse }

// toolkitBroken is a node whose toolkit check failed: the agent closed every gate after the
// toolkit stage and recorded why; the device plugin is gone, so nothing is allocatable.
func toolkitBroken(n *corev1.Node) {
	withoutLabels(config.LabelToolkitReady, config.LabelDeployDevicePlugin, config.LabelDeployFeatureDiscovery, config.LabelDeployExporter)(n)
	n.Annotations[config.AnnotationGateStatus] = `{"driver":{"ready":true,"reason":"driver 580.95.05 loaded"},"container-toolkit":{"ready":false,"reason":"no toolkit status in /var/lib/gpupolicy/toolkit-status.json: containerd has not loaded the nvidia handler"}}`
	withStackCondition("False", config.ReasonToolkitNotLoaded, "stage container-toolkit: no toolkit status in /var/lib/gpupolicy/toolkit-status.json")(n)
	withGPUs(8, 0)(n)
}

// driverDrifted is a node running another driver branch: the agent labels the drift and keeps
// the toolkit gate (and all after it) closed.
func driverDrifted(n *corev1.Node) {
	withoutLabels(config.LabelDeployToolkit, config.LabelToolkitReady, config.LabelDeployDevicePlugin, config.LabelDeployFeatureDiscovery, config.LabelDeployExporter)(n)
	n.Labels[config.LabelDriverVersion] = "570.86.15"
	n.Labels[config.LabelDriverDrift] = "true"
	n.Annotations[config.AnnotationDriverDrift] = "expected 580.95.05 (enforce branch), found 570.86.15"
	n.Annotations[config.AnnotationGateStatus] = `{"driver":{"ready":false,"reason":"driver 570.86.15 does not satisfy 580.95.05 (enforce branch)"}}`
	withStackCondition("False", config.ReasonDriverDrift, "stage driver: drift: driver 570.86.15, policy expects 580.95.05 (enforce branch)")(n)
	withGPUs(0, 0)(n)
}

// withStackCondition adds the agent's GPUStackReady condition as it writes it.
func withStackCondition(status, reason, message string) nodeOpt {
	return func(n *corev1.Node) {
		n.Status.Conditions = append(n.Status.Conditions, corev1.NodeCondition{Type: config.ConditionGPUStackReady,
			Status: corev1.ConditionStatus(status), Reason: reason, Message: message})
	}
}

func runtimeClass(name string, selector map[string]string) *nodev1.RuntimeClass {
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Handler: name}
	if selector != nil {
		rc.Scheduling = &nodev1.Scheduling{NodeSelector: selector}
	}
	return rc
}

// policyRuntimeClass is the RuntimeClass the renderer emits.
func policyRuntimeClass() *nodev1.RuntimeClass {
	return runtimeClass("nvidia", map[string]string{config.LabelToolkitReady: "true"})
}

const agentConfigYAML = `interval: 30s
driver: {source: preinstalled, version: "580.95.05", enforce: branch}
cudaVersion: "12.8"
containerRuntime: {name: containerd, version: "2.1", configPath: /etc/containerd/config.toml, dropInDir: /etc/containerd/conf.d, socket: /run/containerd/containerd.sock, restartMode: systemd}
toolkit: {source: container, version: 1.18.0, runtimeClassName: nvidia, runtimePath: /usr/local/nvidia/toolkit/nvidia-container-runtime, cdi: true, dropInSHA256: "0000"}
stages: {featureDiscovery: true, exporter: true}
devicePlugin: {resourceName: nvidia.com/gpu, migStrategy: none, deviceListStrategy: cdi-cri, sharing: {timeSlicing: {replicas: 1}}, healthChecks: {enabled: true, ignoredXIDs: [13, 31, 43, 45, 68, 109]}}
`

func agentConfigMap() *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "gpu-system", Name: config.AgentConfigMap},
		Data: map[string]string{config.AgentConfigFile: agentConfigYAML}}
}

type podOpt func(*corev1.Pod)

// gpuPod is a pending pod asking for GPUs the way the README tells users to: the policy's
// RuntimeClass, nvidia.com/gpu limits and a toleration for the GPU taint.
func gpuPod(ns, name string, gpus int64, opts ...podOpt) *corev1.Pod {
	rc := "nvidia"
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "-" + name)},
		Spec: corev1.PodSpec{
			RuntimeClassName: &rc,
			Containers: []corev1.Container{{Name: "cuda", Image: "nvcr.io/nvidia/cuda:12.8.0-base-ubuntu24.04",
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(gpus, resource.DecimalSI)}}}},
			Tolerations: []corev1.Toleration{{Key: gpuTaintKey, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func boundTo(node string, phase corev1.PodPhase) podOpt {
	return func(p *corev1.Pod) { p.Spec.NodeName = node; p.Status.Phase = phase }
}

func noTolerations(p *corev1.Pod) { p.Spec.Tolerations = nil }

func withNodeSelector(k, v string) podOpt {
	return func(p *corev1.Pod) { p.Spec.NodeSelector = map[string]string{k: v} }
}

var eventSeq int

// warning is a Warning event about the pod, as the scheduler or kubelet records it.
func warning(p *corev1.Pod, reason, msg string) *corev1.Event {
	eventSeq++
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: p.Namespace, Name: fmt.Sprintf("%s.%d", p.Name, eventSeq)},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID},
		Reason:         reason, Message: msg, Type: corev1.EventTypeWarning,
		LastTimestamp: metav1.NewTime(epoch.Add(time.Duration(eventSeq) * time.Second)),
	}
}

func objects(objs ...runtime.Object) []runtime.Object { return objs }
