package doctor

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/klog/v2"
)

// The scheduler's node filters that matter for a GPU pod, reduced to what doctor must explain:
// label selectors, required node affinity and taints. They mirror kube-scheduler's
// NodeAffinity and TaintToleration plugins for the operators Kubernetes accepts.

func runtimeClassSelector(rc *nodev1.RuntimeClass) map[string]string {
	if rc == nil || rc.Scheduling == nil {
		return nil
	}
	return rc.Scheduling.NodeSelector
}

// podSelects reports whether the pod's own nodeSelector and required node affinity admit n.
func podSelects(p *corev1.Pod, n *corev1.Node) bool {
	for k, v := range p.Spec.NodeSelector {
		if got, ok := n.Labels[k]; !ok || got != v {
			return false
		}
	}
	a := p.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return true
	}
	// Terms are ORed, requirements within a term ANDed.
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		if termMatches(term, n) {
			return true
		}
	}
	return false
}

func termMatches(t corev1.NodeSelectorTerm, n *corev1.Node) bool {
	if len(t.MatchExpressions) == 0 && len(t.MatchFields) == 0 {
		return false // an empty term selects nothing
	}
	for _, r := range t.MatchExpressions {
		v, ok := n.Labels[r.Key]
		if !requirementMatches(r, v, ok) {
			return false
		}
	}
	for _, r := range t.MatchFields {
		// metadata.name is the only field the API accepts here.
		if !requirementMatches(r, n.Name, r.Key == "metadata.name") {
			return false
		}
	}
	return true
}

func requirementMatches(r corev1.NodeSelectorRequirement, value string, present bool) bool {
	in := func() bool {
		for _, want := range r.Values {
			if value == want {
				return true
			}
		}
		return false
	}
	switch r.Operator {
	case corev1.NodeSelectorOpIn:
		return present && in()
	case corev1.NodeSelectorOpNotIn:
		return !present || !in()
	case corev1.NodeSelectorOpExists:
		return present
	case corev1.NodeSelectorOpDoesNotExist:
		return !present
	case corev1.NodeSelectorOpGt, corev1.NodeSelectorOpLt:
		if !present || len(r.Values) != 1 {
			return false
		}
		have, err1 := strconv.ParseInt(value, 10, 64)
		want, err2 := strconv.ParseInt(r.Values[0], 10, 64)
		if err1 != nil || err2 != nil {
			return false
		}
		if r.Operator == corev1.NodeSelectorOpGt {
			return have > want
		}
		return have < want
	}
	return false
}

// untoleratedTaint returns the first NoSchedule/NoExecute taint of n the pod does not tolerate.
func untoleratedTaint(p *corev1.Pod, n *corev1.Node) (corev1.Taint, bool) {
	for _, t := range n.Spec.Taints {
		if t.Effect == corev1.TaintEffectPreferNoSchedule {
			continue
		}
		tolerated := false
		for i := range p.Spec.Tolerations {
			if p.Spec.Tolerations[i].ToleratesTaint(klog.Background(), &t, true) {
				tolerated = true
				break
			}
		}
		if !tolerated {
			return t, true
		}
	}
	return corev1.Taint{}, false
}

func taintString(t corev1.Taint) string {
	if t.Value == "" {
		return fmt.Sprintf("%s:%s", t.Key, t.Effect)
	}
	return fmt.Sprintf("%s=%s:%s", t.Key, t.Value, t.Effect)
}

func tolerationFor(t corev1.Taint) string {
	return fmt.Sprintf("{key: %s, operator: Exists, effect: %s}", t.Key, t.Effect)
}

// podSelectorString describes the pod's own placement constraints for a message.
func podSelectorString(p *corev1.Pod) string {
	var parts []string
	if len(p.Spec.NodeSelector) > 0 {
		parts = append(parts, "nodeSelector "+selectorString(p.Spec.NodeSelector))
	}
	if a := p.Spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		parts = append(parts, "required node affinity")
	}
	return strings.Join(parts, " and ")
}

func nodeAvailable(n *corev1.Node) bool {
	if n.Spec.Unschedulable {
		return false
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
