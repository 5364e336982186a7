package doctor

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpupolicy/gpupolicy/fn/doctor/doctortest"
	"github.com/gpupolicy/gpupolicy/fn/internal/fntest"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

func clusterPolicy(name, state string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy",
		"metadata": map[string]any{"name": name},
		"status":   map[string]any{"state": state},
	}}
	return u
}

func operatorObjects(policies ...runtime.Object) Objects {
	return doctortest.FakeDynamic(policies...)
}

// A cluster mid-takeover: one node the operator still manages, one handed over while the
// operator still runs (the two fight over its labels), and the operator's RuntimeClass.
func TestOperatorInTheCluster(t *testing.T) {
	rc := policyRuntimeClass()
	rc.OwnerReferences = []metav1.OwnerReference{{APIVersion: "nvidia.com/v1", Kind: "ClusterPolicy", Name: "cluster-policy", UID: "u1"}}
	operatorPod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "gpu-operator", Name: "gpu-operator-7d9c", Labels: map[string]string{"app": "gpu-operator"}},
		Spec:       corev1.PodSpec{NodeName: "cpu-a", Containers: []corev1.Container{{Name: "gpu-operator"}}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	objs := objects(
		gpuNode("gpu-a", withLabel(config.LabelOperatorValidator, "true")),
		gpuNode("gpu-b", withLabel(config.LabelOperatorOperands, "false")),
		cpuNode("cpu-a"), agentConfigMap(), rc, operatorPod)
	r := diagnoseCase(t, "cluster-gpu-operator", Input{Objects: operatorObjects(clusterPolicy("cluster-policy", "ready"))}, objs)
	want := map[string]string{
		"gpu-operator":          "manages 1 GPU nodes (gpu-a)",
		"gpu-operator-conflict": "1 nodes (gpu-b) are handed over",
		"runtimeclass-owner":    "RuntimeClass nvidia is owned by ClusterPolicy cluster-policy",
	}
	for _, f := range r.Cluster {
		if sub, ok := want[f.Check]; ok {
			if !strings.Contains(f.Message, sub) || (f.Check == "gpu-operator" && !strings.Contains(f.Fix, "kubectl -n gpu-operator scale deployment gpu-operator --replicas=0")) {
				t.Errorf("%s: %s (fix %s)", f.Check, f.Message, f.Fix)
			}
			delete(want, f.Check)
		}
	}
	if len(want) > 0 {
		t.Errorf("missing cluster findings %v in %+v", want, r.Cluster)
	}
	if f, ok := firstError(nodeByName(t, r, "gpu-a").Findings); !ok || f.Check != "gpu-operator" {
		t.Errorf("gpu-a: want the gpu-operator error first, got %+v", f)
	}

	// Without a ClusterPolicy (the hand-over's second step done) nothing is said of the
	// operator but the labels it left.
	r = diagnoseCase(t, "cluster-gpu-operator-gone", Input{Objects: operatorObjects()}, objects(
		gpuNode("gpu-b", withLabel(config.LabelOperatorOperands, "false"), withLabel(config.LabelOperatorValidator, "true")),
		agentConfigMap(), policyRuntimeClass()))
	for _, f := range r.Cluster {
		if strings.HasPrefix(f.Check, "gpu-operator") || f.Check == "runtimeclass-owner" {
			t.Errorf("no operator left, yet: %+v", f)
		}
	}
	if n := nodeByName(t, r, "gpu-b"); !hasFinding(n.Findings, SeverityWarning, "gpu-operator-labels") {
		t.Errorf("gpu-b: %+v", n.Findings)
	}
}

// The binary's REST read of the ClusterPolicies, through Run: a served list is reported, and a
// forbidden list is a note, not a failure.
func TestOperatorOverHTTP(t *testing.T) {
	node := *gpuNode("gpu-a", withLabel(config.LabelOperatorValidator, "true"))
	list := map[string]any{"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicyList", "metadata": map[string]any{},
		"items": []any{clusterPolicy("cluster-policy", "notReady").Object}}
	srv := apiServer(t, []corev1.Node{node}, nil, map[string]any{"/apis/nvidia.com/v1/clusterpolicies": list})
	code, stdout, stderr := fntest.Call(Run, Options{Kubeconfig: writeKubeconfig(t, srv.URL)})
	if code != ExitProblems || !strings.Contains(stdout, "ClusterPolicy cluster-policy exists (state notReady)") || !strings.Contains(stdout, "gpu-a  Ready    all open") {
		t.Errorf("exit %d, stderr %q:\n%s", code, stderr, stdout)
	}
	forbidden := &metav1.Status{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}, Status: "Failure", Reason: metav1.StatusReasonForbidden, Code: 403,
		Message: `clusterpolicies.nvidia.com is forbidden: User "dev" cannot list resource "clusterpolicies" in API group "nvidia.com" at the cluster scope`}
	srv = apiServer(t, []corev1.Node{node}, nil, map[string]any{"/apis/nvidia.com/v1/clusterpolicies": forbidden})
	code, stdout, stderr = fntest.Call(Run, Options{Kubeconfig: writeKubeconfig(t, srv.URL)})
	if code != ExitProblems || !strings.Contains(stdout, "a live GPU Operator is not looked for") {
		t.Errorf("forbidden: exit %d, stderr %q:\n%s", code, stderr, stdout)
	}
}
