package doctor

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestPodSelects(t *testing.T) {
	node := gpuNode("gpu-a", withLabel("pool", "training"), withLabel("gpu-generation", "9"))
	req := func(key string, op corev1.NodeSelectorOperator, values ...string) corev1.NodeSelectorRequirement {
		return corev1.NodeSelectorRequirement{Key: key, Operator: op, Values: values}
	}
	withAffinity := func(terms ...corev1.NodeSelectorTerm) *corev1.Pod {
		p := gpuPod("default", "train", 1)
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms}}}
		return p
	}
	term := func(reqs ...corev1.NodeSelectorRequirement) corev1.NodeSelectorTerm {
		return corev1.NodeSelectorTerm{MatchExpressions: reqs}
	}
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"no constraints", gpuPod("default", "train", 1), true},
		{"nodeSelector matches", gpuPod("default", "train", 1, withNodeSelector("pool", "training")), true},
		{"nodeSelector misses", gpuPod("default", "train", 1, withNodeSelector("pool", "inference")), false},
		{"In", withAffinity(term(req("pool", corev1.NodeSelectorOpIn, "inference", "training"))), true},
		{"NotIn", withAffinity(term(req("pool", corev1.NodeSelectorOpNotIn, "training"))), false},
		{"NotIn absent key", withAffinity(term(req("zone", corev1.NodeSelectorOpNotIn, "a"))), true},
		{"Exists", withAffinity(term(req("pool", corev1.NodeSelectorOpExists))), true},
		{"DoesNotExist", withAffinity(term(req("pool", corev1.NodeSelectorOpDoesNotExist))), false},
		{"Gt", withAffinity(term(req("gpu-generation", corev1.NodeSelectorOpGt, "8"))), true},
		{"Lt", withAffinity(term(req("gpu-generation", corev1.NodeSelectorOpLt, "8"))), false},
		{"Gt not a number", withAffinity(term(req("pool", corev1.NodeSelectorOpGt, "8"))), false},
		{"terms are ORed", withAffinity(term(req("pool", corev1.NodeSelectorOpIn, "x")), term(req("pool", corev1.NodeSelectorOpIn, "training"))), true},
		{"requirements are ANDed", withAffinity(term(req("pool", corev1.NodeSelectorOpIn, "training"), req("zone", corev1.NodeSelectorOpExists))), false},
		{"empty term selects nothing", withAffinity(corev1.NodeSelectorTerm{}), false},
		{"matchFields metadata.name", withAffinity(corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{
			req("metadata.name", corev1.NodeSelectorOpIn, "gpu-a")}}), true},
	} {
		if got := podSelects(tc.pod, node); got != tc.want {
			t.Errorf("%s: podSelects = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestUntoleratedTaint(t *testing.T) {
	node := gpuNode("gpu-a", withTaint(gpuTaintKey, "present"))
	node.Spec.Taints = append(node.Spec.Taints, corev1.Taint{Key: "soft", Effect: corev1.TaintEffectPreferNoSchedule})
	if _, bad := untoleratedTaint(gpuPod("default", "train", 1), node); bad {
		t.Error("the GPU toleration (Exists) must tolerate nvidia.com/gpu=present:NoSchedule; PreferNoSchedule never blocks")
	}
	taint, bad := untoleratedTaint(gpuPod("default", "train", 1, noTolerations), node)
	if !bad || taintString(taint) != "nvidia.com/gpu=present:NoSchedule" {
		t.Errorf("want the GPU taint reported, got %v %v", taint, bad)
	}
	equal := gpuPod("default", "train", 1, func(p *corev1.Pod) {
		p.Spec.Tolerations = []corev1.Toleration{{Key: gpuTaintKey, Value: "absent", Effect: corev1.TaintEffectNoSchedule}}
	})
	if _, bad := untoleratedTaint(equal, node); !bad {
		t.Error("a toleration with another value must not tolerate the taint")
	}
}
