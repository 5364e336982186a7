package upgrade

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/gpupolicy/gpupolicy/plugin/agent/nodeapi"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// driftTaint is the taint onDrift: taint puts on a drifted preinstalled node.
var driftTaint = corev1.Taint{Key: config.TaintDriverDrift, Effect: corev1.TaintEffectNoSchedule}

// specChange is what the step may change in a node's spec (the guardrails allow nothing else):
// unschedulable, the drift taint, and the marker that it cordoned the node itself.
type specChange struct {
	unschedulable *bool
	taint         *bool // true: add driftTaint; false: remove it
}

// patchSpec applies c to the node with its resourceVersion as precondition (the taints list
// is replaced whole by a merge patch: a concurrent change must conflict, not be lost),
// re-reading on conflict. It returns the node after the change.
func patchSpec(ctx context.Context, client kubernetes.Interface, name string, c specChange) (*corev1.Node, error) {
	for range 8 {
		node, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("get node %s: %w", name, err)
		}
		spec := map[string]any{}
		meta := map[string]any{"resourceVersion": node.ResourceVersion}
		if u := c.unschedulable; u != nil && node.Spec.Unschedulable != *u {
			if *u {
				spec["unschedulable"] = true
				meta["annotations"] = map[string]any{config.AnnotationDriverUpgradeCordoned: "true"}
			} else {
				spec["unschedulable"] = nil
				meta["annotations"] = map[string]any{config.AnnotationDriverUpgradeCordoned: nil}
			}
		}
		if t := c.taint; t != nil {
			has := slices.ContainsFunc(node.Spec.Taints, isDriftTaint)
			switch {
			case *t && !has:
				spec["taints"] = append(slices.Clone(node.Spec.Taints), driftTaint)
			case !*t && has:
				spec["taints"] = slices.DeleteFunc(slices.Clone(node.Spec.Taints), isDriftTaint)
			}
		}
		if len(spec) == 0 {
			return node, nil
		}
		body, err := json.Marshal(map[string]any{"metadata": meta, "spec": spec})
		if err != nil {
			return nil, err
		}
		out, err := client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: nodeapi.FieldManager})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("patch node %s spec: %w", name, err)
		}
		return out, nil
	}
	return nil, fmt.Errorf("patch node %s spec: conflicts did not stop", name)
}

func isDriftTaint(t corev1.Taint) bool { return t.Key == config.TaintDriverDrift }

func ptr[T any](v T) *T { return &v }
