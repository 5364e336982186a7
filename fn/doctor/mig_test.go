package doctor

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// migAgentConfigMap is agentConfigYAML with a training pool that declares two MIG layouts,
// and migLayoutsConfigMap their rendered mig-parted file.
func migAgentConfigMap() *corev1.ConfigMap {
	cm := agentConfigMap()
	cm.Data[config.AgentConfigFile] += `nodePools:
- name: training
  nodeSelector: {pool: training}
  devicePlugin: {pool: training, resourceName: nvidia.com/gpu, migStrategy: mixed, deviceListStrategy: cdi-cri, sharing: {timeSlicing: {replicas: 1}}, healthChecks: {enabled: true}}
  mig: {layout: all-1g.5gb, layouts: [all-1g.5gb, all-3g.20gb], configFile: training.yaml}
`
	return cm
}

func migLayoutsConfigMap() *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "gpu-system", Name: config.MIGConfigMap},
		Data: map[string]string{"training.yaml": `version: v1
mig-configs:
  all-1g.5gb:
  - devices: all
    mig-enabled: true
    mig-devices: {1g.5gb: 7}
  all-3g.20gb:
  - devices: all
    mig-enabled: true
    mig-devices: {3g.20gb: 2}
`}}
}

func trainingNode(name string, labels, annotations map[string]string) *corev1.Node {
	n := migNode(name)
	n.Labels["pool"] = "training"
	n.Labels[config.LabelDeployMIGManager] = config.GateOpen // the toolkit check opened the MIG step
	for k, v := range labels {
		n.Labels[k] = v
	}
	for k, v := range annotations {
		n.Annotations[k] = v
	}
	return n
}

// A pod Pending on a MIG profile that a declared layout provides, but no node runs: the fix
// names the layout and the label that moves a node onto it; a profile no layout provides
// names the ones that exist.
func TestPodPendingOnAMIGProfileTheLayoutDoesNotProvide(t *testing.T) {
	for _, tc := range []struct{ name, res, fixHas string }{
		{"pod-mig-profile-other-layout", "nvidia.com/mig-3g.20gb", "layout all-3g.20gb of pool training provides 3g.20gb, but no node runs it now: move a node of that pool onto it with kubectl label node NODE nvidia.com/mig.config=all-3g.20gb"},
		{"pod-mig-profile-no-layout", "nvidia.com/mig-2g.10gb", "no MIG layout of the policy provides 2g.10gb (they provide 1g.5gb, 3g.20gb)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := []runtime.Object{trainingNode("gpu-m", nil, nil), policyRuntimeClass(), migAgentConfigMap(), migLayoutsConfigMap(),
				gpuPod("default", "train", 0, asksFor(tc.res, 1))}
			r := diagnoseCase(t, tc.name, Input{}, objs)
			if len(r.Pods) != 1 || r.Pods[0].FailedGate != PodGateGPUResource || !strings.Contains(r.Pods[0].Finding.Fix, tc.fixHas) {
				t.Fatalf("pods %+v, want fix containing %q", r.Pods, tc.fixHas)
			}
		})
	}
}

// A node in the middle of a MIG change says which state, why, and what to do.
func TestNodeStuckInAMIGChange(t *testing.T) {
	for _, tc := range []struct {
		name, state, message, sev, fixHas string
	}{
		{"node-mig-pending-held", config.MIGStatePending, "pods hold GPUs the layout changes, so they are left as they are until the pods end: GPU 3 by ml/train-7", SeverityWarning, "kubectl drain gpu-m"},
		{"node-mig-rebooting", config.MIGStateRebooting, "layout all-3g.20gb: GPU 0: the MIG mode change is pending until the GPU is reset", SeverityError, "nvidia-smi -r"},
		{"node-mig-failed", config.MIGStateFailed, "label nvidia.com/mig.config=all-7g names no layout of pool training", SeverityError, "kubectl label node gpu-m nvidia.com/mig.config-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := trainingNode("gpu-m", map[string]string{config.LabelMIGConfigState: tc.state, config.LabelMIGConfig: "all-3g.20gb"},
				map[string]string{config.AnnotationMIGMessage: tc.message})
			r := diagnoseCase(t, tc.name, Input{}, []runtime.Object{n, policyRuntimeClass(), migAgentConfigMap(), migLayoutsConfigMap()})
			node := nodeByName(t, r, "gpu-m")
			var f *Finding
			for i := range node.Findings {
				if node.Findings[i].Check == CheckMIGConfig {
					f = &node.Findings[i]
				}
			}
			if f == nil || f.Severity != tc.sev || !strings.Contains(f.Message, tc.message) || !strings.Contains(f.Fix, tc.fixHas) {
				t.Fatalf("MIG finding %+v, want %s with %q and fix %q", f, tc.sev, tc.message, tc.fixHas)
			}
		})
	}
}
