package doctor

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// poolDriverAgentConfigMap is agentConfigYAML with a training pool on a driver of its own.
func poolDriverAgentConfigMap() *corev1.ConfigMap {
	cm := agentConfigMap()
	cm.Data[config.AgentConfigFile] += `nodePools:
- name: training
  nodeSelector: {pool: training}
  devicePlugin: {pool: training, resourceName: nvidia.com/gpu, migStrategy: none, deviceListStrategy: cdi-cri, sharing: {timeSlicing: {replicas: 1}}, healthChecks: {enabled: true}}
  driver: {source: container, version: "570.195.03", enforce: exact}
upgrade: {maxUnavailable: "2", drain: true, drainTimeout: 10m, waitForJobsTimeout: 0s}
`
	return cm
}

// A node in the middle of a driver upgrade says which step, since when, and what holds it:
// the PodDisruptionBudget by name, the job pods, the slot holders; a failed one is an error
// whose fix is the label that retries.
func TestNodeStuckInADriverUpgrade(t *testing.T) {
	for _, tc := range []struct {
		name, state, message, sev, msgHas, fixHas string
	}{
		{"node-upgrade-pdb", config.UpgradeStatePodDeletion,
			"eviction of pod ml/serve-0 is blocked by PodDisruptionBudget serve-pdb: The disruption budget serve-pdb needs 1 healthy pods and has 1 currently (retrying)",
			SeverityWarning, "step evicting GPU pods", "PodDisruptionBudget serve-pdb allows no disruption"},
		{"node-upgrade-jobs", config.UpgradeStateWaitForJobs, `waiting for 1 job pod(s) selected by "kind=job" to finish: ml/job-1`,
			SeverityWarning, "ml/job-1", "must finish first"},
		{"node-upgrade-slot", config.UpgradeStateRequired, "waiting for an upgrade slot: all 2 (maxUnavailable 2 of 5 nodes) are held by gpu-a, gpu-b",
			SeverityWarning, "held by gpu-a, gpu-b", "waits for an upgrade slot"},
		{"node-upgrade-failed", config.UpgradeStateFailed, "validation failed after 35m0s: driver pod gpu-driver-training-x is not Ready yet; the node stays cordoned",
			SeverityError, "step failed", "kubectl label node gpu-m nvidia.com/gpu-driver-upgrade-state=upgrade-required --overwrite"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := trainingNode("gpu-m", map[string]string{config.LabelDriverUpgradeState: tc.state, config.LabelDriverVersion: "570.195.03"},
				map[string]string{config.AnnotationDriverUpgradeMessage: tc.message, config.AnnotationDriverUpgradeSince: "2026-12-02T01:00:00Z"})
			n.Spec.Unschedulable = true
			r := diagnoseCase(t, tc.name, Input{}, []runtime.Object{n, policyRuntimeClass(), poolDriverAgentConfigMap()})
			node := nodeByName(t, r, "gpu-m")
			var f *Finding
			for i := range node.Findings {
				switch node.Findings[i].Check {
				case CheckDriverUpgrade:
					f = &node.Findings[i]
				case "driver-drift":
					t.Errorf("the pool's own driver 570.195.03 was judged against spec.driver: %+v", node.Findings[i])
				}
			}
			if f == nil || f.Severity != tc.sev || !strings.Contains(f.Message, tc.msgHas) || !strings.Contains(f.Message, "since 2026-12-02T01:00:00Z") || !strings.Contains(f.Fix, tc.fixHas) {
				t.Fatalf("upgrade finding %+v, want %s with %q and fix %q", f, tc.sev, tc.msgHas, tc.fixHas)
			}
		})
	}
}
