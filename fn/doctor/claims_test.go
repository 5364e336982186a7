package doctor

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// draClass is a DeviceClass as the policy renders it.
func draClass(name, typ string) *resourcev1.DeviceClass {
	return &resourcev1.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourcev1.DeviceClassSpec{
		Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
			Expression: "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == '" + typ + "'"}}}}}
}

// draSlice is node's ResourceSlice with n devices of type typ (40Gi A100s, or 1g.5gb MIG).
func draSlice(node, typ string, n int) *resourcev1.ResourceSlice {
	s := &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: node + "-gpu.nvidia.com"}, Spec: resourcev1.ResourceSliceSpec{
		Driver: "gpu.nvidia.com", NodeName: &node, Pool: resourcev1.ResourcePool{Name: node, ResourceSliceCount: 1}}}
	for i := range n {
		str := func(v string) resourcev1.DeviceAttribute { return resourcev1.DeviceAttribute{StringValue: &v} }
		d := resourcev1.Device{Name: fmt.Sprintf("gpu-%d", i), Attributes: map[resourcev1.QualifiedName]resourcev1.DeviceAttribute{
			"type": str(typ), "productName": str("NVIDIA A100-SXM4-40GB")},
			Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{"memory": {Value: resource.MustParse("40Gi")}}}
		if typ == "mig" {
			d.Name = fmt.Sprintf("gpu-0-mig-%d-0", i)
			d.Attributes["profile"] = str("1g.5gb")
			d.Capacity["memory"] = resourcev1.DeviceCapacity{Value: resource.MustParse("5Gi")}
		}
		s.Spec.Devices = append(s.Spec.Devices, d)
	}
	return s
}

// draClaim asks for one device of class, with an optional selector; allocated: the devices
// it holds on node.
func draClaim(name, class, selector, node string, allocated ...string) *resourcev1.ResourceClaim {
	req := resourcev1.DeviceRequest{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: class,
		AllocationMode: resourcev1.DeviceAllocationModeExactCount, Count: 1}}
	if selector != "" {
		req.Exactly.Selectors = []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: selector}}}
	}
	c := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("claim-" + name)},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{req}}}}
	if len(allocated) > 0 {
		c.Status.Allocation = &resourcev1.AllocationResult{}
		for _, d := range allocated {
			c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results,
				resourcev1.DeviceRequestAllocationResult{Request: "gpu", Driver: "gpu.nvidia.com", Pool: node, Device: d})
		}
	}
	return c
}

// claimPod is a pending pod using claim; unschedulable adds the scheduler's verdict.
func claimPod(name, claim string, unschedulable bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("pod-" + name)},
		Spec: corev1.PodSpec{
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &claim}},
			Containers: []corev1.Container{{Name: "cuda", Image: "nvcr.io/nvidia/cuda:12.8.0-base-ubuntu24.04",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending}}
	if unschedulable {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable",
			Message: "0/2 nodes are available: 2 cannot allocate all claims. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."}}
	}
	return p
}

// TestClaimDiagnoses: a pod whose ResourceClaim stays unallocated gets the reason: the claim or
// its class does not exist, nothing publishes the devices, every device is taken, or none
// satisfies the request's selector.
func TestClaimDiagnoses(t *testing.T) {
	classes := []runtime.Object{draClass("gpu.nvidia.com", "gpu"), draClass("mig.nvidia.com", "mig")}
	with := func(objs ...runtime.Object) []runtime.Object {
		return append(append(objs, classes...), gpuNode("gpu-a"), agentConfigMap(), policyRuntimeClass())
	}
	cases := []struct {
		name, gate, has string
		objs            []runtime.Object
		in              Input
	}{
		{name: "claim-wrong-class", gate: PodGateDeviceClass, has: `names DeviceClass "gpu.nvidia.co", which does not exist`,
			objs: with(draSlice("gpu-a", "gpu", 8), draClaim("train", "gpu.nvidia.co", "", ""), claimPod("train", "train", true))},
		// Without its claim nothing says the pod wants GPUs: asked for by name.
		{name: "claim-missing", gate: PodGateClaimMissing, has: "ResourceClaim default/train, which does not exist",
			objs: with(draSlice("gpu-a", "gpu", 8), claimPod("train", "train", false)), in: Input{Pod: "default/train"}},
		{name: "claim-no-dra-plugin", gate: PodGateNoDRADevices, has: "set allocation: dra",
			objs: with(draClaim("train", "gpu.nvidia.com", "", ""), claimPod("train", "train", true))},
		{name: "claim-no-mig", gate: PodGateNoDRADevices, has: "declare a MIG layout",
			objs: with(draSlice("gpu-a", "gpu", 8), draClaim("train", "mig.nvidia.com", "", ""), claimPod("train", "train", true))},
		{name: "claim-all-taken", gate: PodGateClaimDevices, has: "2 of the 2 devices of class gpu.nvidia.com are allocated to other claims (default/a, default/b)",
			objs: with(draSlice("gpu-a", "gpu", 2), draClaim("a", "gpu.nvidia.com", "", "gpu-a", "gpu-0"), draClaim("b", "gpu.nvidia.com", "", "gpu-a", "gpu-1"),
				draClaim("train", "gpu.nvidia.com", "", ""), claimPod("train", "train", true))},
		{name: "claim-no-device-matches", gate: PodGateClaimDevices, has: "no device of class gpu.nvidia.com satisfies its selector device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('80Gi')) >= 0",
			objs: with(draSlice("gpu-a", "gpu", 8), draClaim("train", "gpu.nvidia.com", "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('80Gi')) >= 0", ""), claimPod("train", "train", true))},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := diagnoseCase(t, tc.name, tc.in, tc.objs)
			if len(r.Pods) != 1 {
				t.Fatalf("want the claim's pod reported, got %+v", r.Pods)
			}
			p := r.Pods[0]
			if p.FailedGate != tc.gate || !strings.Contains(p.Finding.Message+" "+p.Finding.Fix, tc.has) {
				t.Errorf("gate %s, finding %q / %q; want gate %s naming %q", p.FailedGate, p.Finding.Message, p.Finding.Fix, tc.gate, tc.has)
			}
		})
	}
	// Waiting for the scheduler (no verdict yet, devices free) is not a finding of the claim.
	r := diagnoseCase(t, "claim-waiting", Input{}, with(draSlice("gpu-a", "gpu", 8),
		draClaim("train", "gpu.nvidia.com", "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0", ""), claimPod("train", "train", false)))
	if len(r.Pods) != 1 || strings.HasPrefix(r.Pods[0].FailedGate, "resourceclaim") || r.Pods[0].FailedGate == PodGateDeviceClass {
		t.Errorf("a claim the scheduler has not judged yet: %+v", r.Pods)
	}
}

// draAgentConfigMap is the agent ConfigMap of a policy with allocation: dra.
func draAgentConfigMap() *corev1.ConfigMap {
	cm := agentConfigMap()
	cm.Data[config.AgentConfigFile] = strings.Replace(agentConfigYAML, "devicePlugin: {resourceName", "devicePlugin: {allocation: dra, resourceName", 1)
	return cm
}

// TestDRANodes: a node the DRA plugin serves is judged by its published devices, not by the
// nvidia.com/gpu it (rightly) lacks: ready with its slice, an error naming gpu-dra-plugin
// without.
func TestDRANodes(t *testing.T) {
	node := gpuNode("gpu-a", withGPUs(0, 0))
	for _, tc := range []struct {
		name  string
		objs  []runtime.Object
		check string
	}{
		{"dra-node-ready", objects(node, draSlice("gpu-a", "gpu", 8), draAgentConfigMap(), policyRuntimeClass(),
			draClaim("train", "gpu.nvidia.com", "", "gpu-a", "gpu-0")), ""},
		{"dra-node-no-slices", objects(node, draAgentConfigMap(), policyRuntimeClass()), "dra-devices"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := diagnoseCase(t, tc.name, Input{}, tc.objs)
			n := nodeByName(t, r, "gpu-a")
			if tc.check == "" {
				if hasFinding(n.Findings, SeverityError, "gpu-capacity") || hasFinding(n.Findings, SeverityError, "dra-devices") || n.GPUs.Allocatable != 8 || n.GPUs.InUse != 1 {
					t.Errorf("a DRA node with its slice: %+v", n)
				}
				return
			}
			if !hasFinding(n.Findings, SeverityError, tc.check) {
				t.Errorf("want %s: %+v", tc.check, n.Findings)
			}
		})
	}
}
