package doctor

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// A live NVIDIA GPU Operator labels GPU nodes with the gate keys gpupolicy uses and owns what it
// created (its DaemonSets, often the RuntimeClass) through its ClusterPolicy. Doctor says where
// it still rules, where the two would fight, and what a hand-over would delete.

// clusterPolicies is the GPU Operator's ClusterPolicy kind (cluster-scoped).
var clusterPolicies = schema.GroupVersionResource{Group: "nvidia.com", Version: "v1", Resource: "clusterpolicies"}

// takeoverFix is the hand-over in the README's order ("Coming from the GPU Operator").
func takeoverFix(operatorNS, policy string) string {
	return fmt.Sprintf("take the nodes over as the README's \"Coming from the GPU Operator\" says: stop the operator (kubectl -n %s scale deployment gpu-operator --replicas=0), hand each node over (kubectl label node NODE %s=false, a canary first) and, once every node is GPUStackReady, delete ClusterPolicy %s (its operands go, its node labels stay)",
		operatorNS, config.LabelOperatorOperands, policy)
}

// operatorNodeFinding is a node's own view: held by the operator, handed over with the
// operator's labels still on it, or running on gates adopted from the operator (no Check when
// none of these).
func operatorNodeFinding(n *corev1.Node, agentPods string) Finding {
	state, why := config.Operator(n.Labels)
	switch state {
	case config.OperatorManaged:
		return Finding{Severity: SeverityError, Check: "gpu-operator", Message: why,
			Fix: fmt.Sprintf("when gpupolicy's stack is applied and the operator stopped: kubectl label node %s %s=false (README: Coming from the GPU Operator)", n.Name, config.LabelOperatorOperands)}
	case config.OperatorHandedOver:
		var left []string
		for _, l := range config.OperatorOnlyLabels {
			if _, ok := n.Labels[l]; ok {
				left = append(left, l+"-")
			}
		}
		return Finding{Severity: SeverityWarning, Check: "gpu-operator-labels", Message: why + ": the node agent removes them on its next pass",
			Fix: fmt.Sprintf("if they stay, the agent is not running here (%s); an older agent leaves them: kubectl label node %s %s", agentPods, n.Name, strings.Join(left, " "))}
	}
	if a := n.Annotations[config.AnnotationAdoptedGates]; a != "" {
		return Finding{Severity: SeverityWarning, Check: "gpu-operator-adopted", Message: fmt.Sprintf("gates %s are kept open from the GPU Operator until gpupolicy's own stages verify this node", a),
			Fix: fmt.Sprintf("this lasts until gpupolicy's toolkit stage has run here; if it stays, look at its pod: %s", agentPods)}
	}
	return Finding{}
}

// diagnoseOperator reports the ClusterPolicy objects of a live GPU Operator, the nodes it still
// manages, a hand-over the running operator undoes, and a RuntimeClass its deletion would take.
func (s *snapshot) diagnoseOperator(ctx context.Context) error {
	s.runtimeClassOwnerFinding()
	if s.in.Objects == nil {
		return nil
	}
	list, err := s.in.Objects.List(ctx, clusterPolicies)
	switch {
	case apierrors.IsNotFound(err):
		return nil // the cluster does not serve nvidia.com/v1: no GPU Operator
	case err != nil:
		return s.note(s.readErr("list", clusterPolicies.Resource+"."+clusterPolicies.Group, "", "", err), "a live GPU Operator is not looked for")
	}
	if len(list) == 0 {
		return nil
	}
	var managed, handedOver []string
	for i := range s.nodes {
		switch state, _ := config.Operator(s.nodes[i].Labels); {
		case state == config.OperatorManaged:
			managed = append(managed, s.nodes[i].Name)
		case s.nodes[i].Labels[config.LabelOperatorOperands] == config.GateOptOut:
			handedOver = append(handedOver, s.nodes[i].Name)
		}
	}
	operatorNS, running := s.operatorPods()
	for _, cp := range list {
		state, _, _ := unstructured.NestedString(cp.Object, "status", "state")
		s.report.Cluster = append(s.report.Cluster, Finding{
			Severity: SeverityWarning, Check: "gpu-operator",
			Message: fmt.Sprintf("ClusterPolicy %s exists (state %s): the GPU Operator runs in this cluster and manages %d GPU nodes%s, where gpupolicy's agent holds its gates",
				cp.GetName(), orUnknown(state), len(managed), nameList(managed)),
			Fix: takeoverFix(operatorNS, cp.GetName()),
		})
	}
	if running && len(handedOver) > 0 {
		s.report.Cluster = append(s.report.Cluster, Finding{
			Severity: SeverityError, Check: "gpu-operator-conflict",
			Message: fmt.Sprintf("the GPU Operator is running and a ClusterPolicy exists, and %d nodes%s are handed over with %s=false: the operator removes every nvidia.com/gpu.deploy label from such nodes, the gates gpupolicy's agent opens included, so their stages flap",
				len(handedOver), nameList(handedOver), config.LabelOperatorOperands),
			Fix: fmt.Sprintf("stop the operator before handing nodes over: kubectl -n %s scale deployment gpu-operator --replicas=0 (ClusterPolicy %s goes once every handed-over node is GPUStackReady)", operatorNS, list[0].GetName()),
		})
	}
	return nil
}

// operatorPods is the namespace of the GPU Operator's own pods (the chart labels them
// app=gpu-operator) and whether one is running.
func (s *snapshot) operatorPods() (namespace string, running bool) {
	namespace = "<the operator's namespace>"
	for i := range s.pods {
		p := &s.pods[i]
		if p.Labels["app"] != "gpu-operator" && p.Labels["app.kubernetes.io/component"] != "gpu-operator" {
			continue
		}
		namespace = p.Namespace
		if p.Status.Phase == corev1.PodRunning {
			return namespace, true
		}
	}
	return namespace, false
}

// runtimeClassOwnerFinding: the GPU Operator creates RuntimeClass nvidia owned by its
// ClusterPolicy. gpupolicy's apply adds its fields but leaves the owner, so deleting the
// ClusterPolicy garbage-collects the RuntimeClass the GPU pods name.
func (s *snapshot) runtimeClassOwnerFinding() {
	rc := s.runtimeClass
	if rc == nil {
		return
	}
	i := slices.IndexFunc(rc.OwnerReferences, func(o metav1.OwnerReference) bool {
		return o.Kind == "ClusterPolicy" && strings.HasPrefix(o.APIVersion, clusterPolicies.Group+"/")
	})
	if i < 0 {
		return
	}
	s.report.Cluster = append(s.report.Cluster, Finding{
		Severity: SeverityWarning, Check: "runtimeclass-owner",
		Message: fmt.Sprintf("RuntimeClass %s is owned by ClusterPolicy %s: deleting the ClusterPolicy deletes it, and pods with runtimeClassName %[1]s are refused until Argo CD or Flux re-creates it",
			rc.Name, rc.OwnerReferences[i].Name),
		Fix: fmt.Sprintf(`before deleting the ClusterPolicy: kubectl patch runtimeclass %s --type=json -p '[{"op":"remove","path":"/metadata/ownerReferences"}]'`, rc.Name),
	})
}

// nameList is " (a, b, c)" for up to five names, with a count of the rest.
func nameList(names []string) string {
	if len(names) == 0 {
		return ""
	}
	const most = 5
	if len(names) <= most {
		return " (" + strings.Join(names, ", ") + ")"
	}
	return fmt.Sprintf(" (%s and %d more)", strings.Join(names[:most], ", "), len(names)-most)
}
