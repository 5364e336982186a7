package doctor

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// TestPodDiagnoses: one case per pod gate; the pod is always default/train unless the case
// says otherwise, and each case checks the first failed gate and that the fix names the cause.
func TestPodDiagnoses(t *testing.T) {
	train := gpuPod("default", "train", 1)
	bound := gpuPod("default", "train", 1, boundTo("gpu-a", corev1.PodPending))
	busy := gpuPod("default", "busy", 8, boundTo("gpu-b", corev1.PodRunning))
	stale := gpuNode("gpu-a", withoutLabels(config.LabelToolkitReady, config.LabelDeployDevicePlugin))
	stale.Annotations[config.AnnotationGateStatus] = `{"driver":{"ready":true,"reason":"driver 580.95.05 loaded"},"container-toolkit":{"ready":false,"reason":"containerd config no longer has runtimes.nvidia"}}`

	cases := []struct {
		name   string
		in     Input
		objs   []runtime.Object
		gate   string
		fixHas string // a cause the fix must name
	}{
		{name: "pod-no-device-plugin", gate: PodGateGPUResource, fixHas: "gpu-device-plugin",
			objs: objects(gpuNode("gpu-a", withGPUs(0, 0)), train, policyRuntimeClass())},
		// A person's opt-out is only a warning on the node, but it is why the pod gets no GPU.
		{name: "pod-device-plugin-opted-out", gate: PodGateGPUResource, fixHas: "kubectl label node gpu-a nvidia.com/gpu.deploy.device-plugin-",
			objs: objects(gpuNode("gpu-a", withLabel(config.LabelDeployDevicePlugin, config.GateOptOut), withGPUs(0, 0)), train, policyRuntimeClass())},
		{name: "pod-toolkit-gate-closed", gate: PodGateGPUResource, fixHas: "gpu-container-toolkit",
			objs: objects(gpuNode("gpu-a", toolkitBroken), train, policyRuntimeClass())},
		{name: "pod-driver-drift", gate: PodGateGPUResource, fixHas: "install driver 580.95.05 on gpu-a",
			objs: objects(gpuNode("gpu-a", driverDrifted), gpuNode("gpu-b", driverDrifted), train, policyRuntimeClass())},
		{name: "pod-gpus-in-use", gate: PodGateGPUResource, fixHas: "every GPU is in use",
			objs: objects(gpuNode("gpu-b"), busy, train, policyRuntimeClass())},
		{name: "pod-request-too-large", gate: PodGateGPUResource, fixHas: "lower the request",
			objs: objects(gpuNode("gpu-a"), gpuPod("default", "train", 16), policyRuntimeClass())},
		{name: "pod-no-gpu-nodes", gate: PodGateGPUResource, fixHas: "kubectl label node",
			objs: objects(cpuNode("cpu-a"), train, policyRuntimeClass())},
		{name: "pod-runtimeclass-selects-no-node", gate: PodGateRuntimeClassSelector, fixHas: "scheduling.nodeSelector",
			objs: objects(gpuNode("gpu-a"), train, runtimeClass("nvidia", map[string]string{"nvidia.com/gpu.runtime": "nvidia"}))},
		{name: "pod-runtimeclass-selects-busy-node", gate: PodGateRuntimeClassSelector, fixHas: "gpu-container-toolkit",
			objs: objects(stale, gpuNode("gpu-b"), busy, train, policyRuntimeClass())},
		{name: "pod-runtimeclass-missing", gate: PodGateRuntimeClassMissing, fixHas: "apply the rendered RuntimeClass",
			objs: objects(gpuNode("gpu-a"), train)},
		{name: "pod-node-selector", gate: PodGateNodeSelector, fixHas: "gpu-a",
			objs: objects(gpuNode("gpu-a"), gpuPod("default", "train", 1, withNodeSelector("pool", "training")), policyRuntimeClass())},
		{name: "pod-tolerations", gate: PodGateTolerations, fixHas: "{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}",
			objs: objects(gpuNode("gpu-a", withTaint(gpuTaintKey, "present")), gpuPod("default", "train", 1, noTolerations), policyRuntimeClass())},
		{name: "pod-node-unavailable", gate: PodGateNodeUnavailable, fixHas: "uncordon",
			objs: objects(gpuNode("gpu-a", notReady), train, policyRuntimeClass())},
		{name: "pod-scheduler", gate: PodGateScheduler, fixHas: "not a GPU one",
			objs: objects(gpuNode("gpu-a"), train, policyRuntimeClass(),
				warning(train, "FailedScheduling", "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, 1 node(s) didn't match Pod's node affinity/selector."))},
		{name: "pod-runtime-handler", gate: PodGateRuntimeHandler, fixHas: "containerd lost the handler",
			objs: objects(gpuNode("gpu-a"), bound, policyRuntimeClass(),
				warning(bound, "FailedCreatePodSandBox", `Failed to create pod sandbox: rpc error: code = Unknown desc = failed to get sandbox runtime: no runtime for "nvidia" is configured`))},
		{name: "pod-runtime-handler-unguarded", gate: PodGateRuntimeHandler, fixHas: "should not have admitted",
			objs: objects(gpuNode("gpu-a", toolkitBroken), bound, runtimeClass("nvidia", nil),
				warning(bound, "FailedCreatePodSandBox", `Failed to create pod sandbox: rpc error: code = Unknown desc = RuntimeHandler "nvidia" not supported`))},
		{name: "pod-device-admission", gate: PodGateDeviceAdmission, fixHas: "gpu-device-plugin",
			objs: objects(gpuNode("gpu-a"), gpuPod("default", "train", 1, boundTo("gpu-a", corev1.PodFailed)), policyRuntimeClass(),
				warning(train, "UnexpectedAdmissionError", "Allocate failed due to rpc error: code = Unknown desc = device GPU-0 is unhealthy, which is unexpected"))},
		{name: "pod-container-driver", gate: PodGateContainer, fixHas: "cannot reach the driver",
			objs: objects(gpuNode("gpu-a"), gpuPod("default", "train", 1, boundTo("gpu-a", corev1.PodPending), func(p *corev1.Pod) {
				p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "cuda", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
					Reason: "RunContainerError", Message: "nvidia-container-cli: initialization error: load library failed: libnvidia-ml.so.1: cannot open shared object file"}}}}
			}), policyRuntimeClass())},
		{name: "pod-pool-resource", gate: PodGateGPUResource, fixHas: "every GPU is in use",
			objs: objects(gpuNode("gpu-a"), poolNode("gpu-i"), policyRuntimeClass(), poolConfigMap(),
				gpuPod("default", "serve", 0, boundTo("gpu-i", corev1.PodRunning), asksFor("nvidia.com/gpu.shared", 32)),
				gpuPod("default", "train", 0, asksFor("nvidia.com/gpu.shared", 1)))},
		{name: "pod-mig-profile-missing", gate: PodGateGPUResource, fixHas: "no GPU node advertises the MIG profile 3g.20gb",
			objs: objects(migNode("gpu-m"), policyRuntimeClass(), gpuPod("default", "train", 0, asksFor("nvidia.com/mig-3g.20gb", 1)))},
		{name: "pod-mig-scheduler", gate: PodGateScheduler, fixHas: "not a GPU one",
			objs: objects(migNode("gpu-m"), policyRuntimeClass(), gpuPod("default", "train", 0, asksFor("nvidia.com/mig-1g.5gb", 2)))},
		{name: "pod-affinity", gate: PodGateNodeSelector, fixHas: "required node affinity",
			objs: objects(gpuNode("gpu-a"), policyRuntimeClass(), gpuPod("default", "train", 1, func(p *corev1.Pod) {
				p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
					NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
						{Key: "nvidia.com/gpu.product", Operator: corev1.NodeSelectorOpIn, Values: []string{"NVIDIA-H100-80GB-HBM3"}}}}}}}}
			}))},
		{name: "pod-other-runtimeclass-missing", gate: PodGateRuntimeClassMissing, fixHas: "set runtimeClassName: nvidia",
			objs: objects(gpuNode("gpu-a"), policyRuntimeClass(), gpuPod("default", "train", 1, withRuntimeClass("nvidia-legacy")))},
		{name: "pod-other-runtimeclass", gate: PodGateRuntimeClassSelector, fixHas: "use runtimeClassName: nvidia",
			objs: objects(gpuNode("gpu-a"), policyRuntimeClass(), runtimeClass("nvidia-legacy", map[string]string{"legacy": "true"}),
				gpuPod("default", "train", 1, withRuntimeClass("nvidia-legacy")))},
		{name: "pod-events-order", gate: PodGateRuntimeHandler, fixHas: "containerd lost the handler",
			objs: objects(gpuNode("gpu-a"), bound, policyRuntimeClass(),
				warning(bound, "FailedScheduling", "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."),
				warning(bound, "FailedCreatePodSandBox", `Failed to create pod sandbox: rpc error: code = Unknown desc = failed to get sandbox runtime: no runtime for "nvidia" is configured`))},
		{name: "pod-healthy", in: Input{Pod: "default/busy"}, gate: PodGateNone,
			objs: objects(gpuNode("gpu-b"), busy, policyRuntimeClass())},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if !hasConfigMap(tc.objs) {
				tc.objs = append(tc.objs, agentConfigMap())
			}
			r := diagnoseCase(t, tc.name, tc.in, tc.objs)
			if len(r.Pods) != 1 {
				t.Fatalf("want one pod reported, got %+v", r.Pods)
			}
			p := r.Pods[0]
			if p.FailedGate != tc.gate {
				t.Errorf("first failed gate: want %s, got %s (%s)", tc.gate, p.FailedGate, p.Finding.Message)
			}
			if !strings.Contains(p.Finding.Fix+" "+p.Finding.Message, tc.fixHas) {
				t.Errorf("finding must name %q:\n why: %s\n fix: %s", tc.fixHas, p.Finding.Message, p.Finding.Fix)
			}
		})
	}
}

func hasConfigMap(objs []runtime.Object) bool {
	for _, o := range objs {
		if _, ok := o.(*corev1.ConfigMap); ok {
			return true
		}
	}
	return false
}

// poolConfigMap is the agent config of a policy whose inference pool shares each GPU 4 ways
// under its own resource name.
func poolConfigMap() *corev1.ConfigMap {
	cm := agentConfigMap()
	cm.Data[config.AgentConfigFile] += `nodePools:
- name: inference
  nodeSelector: {pool: inference}
  devicePlugin: {resourceName: nvidia.com/gpu.shared, sharing: {timeSlicing: {replicas: 4}}}
`
	return cm
}

// poolNode is a healthy node of the inference pool: 8 GPUs advertised 4 times each.
func poolNode(name string) *corev1.Node {
	n := gpuNode(name, withLabel("pool", "inference"), withLabel(config.LabelGPUReplicas, "4"))
	n.Status.Capacity = corev1.ResourceList{"nvidia.com/gpu.shared": *resource.NewQuantity(32, resource.DecimalSI)}
	n.Status.Allocatable = n.Status.Capacity.DeepCopy()
	return n
}

// migNode is a healthy node whose 8 GPUs are partitioned into 7 1g.5gb slices each, advertised
// by a device plugin with migStrategy mixed (no whole nvidia.com/gpu left).
func migNode(name string) *corev1.Node {
	n := gpuNode(name)
	n.Status.Capacity = corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(0, resource.DecimalSI),
		"nvidia.com/mig-1g.5gb": *resource.NewQuantity(56, resource.DecimalSI)}
	n.Status.Allocatable = n.Status.Capacity.DeepCopy()
	return n
}

func withRuntimeClass(name string) podOpt {
	return func(p *corev1.Pod) { p.Spec.RuntimeClassName = &name }
}

func asksFor(res string, n int64) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceName(res): *resource.NewQuantity(n, resource.DecimalSI)}
	}
}
