package stages

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpupolicy/gpupolicy/plugin/agent/gate"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// NodeFunc reads this agent's Node.
type NodeFunc func(ctx context.Context) (*corev1.Node, error)

// MIGCheck is ready when the node's pool declares no MIG layout, or the MIG step reported
// success for the layout the node should run (its nvidia.com/mig.config label, else the
// pool's); otherwise its reason is the step's state and message.
func MIGCheck(cfg *config.Agent, node NodeFunc) gate.CheckFunc {
	return func(ctx context.Context) gate.Result {
		n, err := node(ctx)
		if err != nil {
			return gate.Result{Reason: "reading the Node for its MIG state: " + err.Error(), ConditionReason: config.ReasonMIGPending}
		}
		pm, pool := cfg.MIGFor(n.Labels)
		if pm == nil {
			return gate.Result{Ready: true, Reason: "the node's pool declares no MIG layout"}
		}
		want, _, declared := pm.WantedLayout(n.Labels)
		if !declared {
			return gate.Result{Reason: fmt.Sprintf("label %s=%s names no layout of pool %s (declared: %v)", config.LabelMIGConfig, want, pool, pm.Layouts), ConditionReason: config.ReasonMIGConfigFailed}
		}
		state, msg := n.Labels[config.LabelMIGConfigState], n.Annotations[config.AnnotationMIGMessage]
		switch {
		case state == config.MIGStateSuccess && n.Annotations[config.AnnotationMIGApplied] == want:
			return gate.Result{Ready: true, Reason: fmt.Sprintf("MIG layout %s applied", want)}
		case state == config.MIGStateFailed:
			return gate.Result{Reason: fmt.Sprintf("MIG layout %s failed: %s", want, msg), ConditionReason: config.ReasonMIGConfigFailed}
		case state == config.MIGStateRebooting:
			return gate.Result{Reason: fmt.Sprintf("MIG layout %s waits for a GPU reset or reboot: %s", want, msg), ConditionReason: config.ReasonMIGRebooting}
		case state == "":
			return gate.Result{Reason: fmt.Sprintf("waiting for the MIG step (DaemonSet gpu-mig-manager) to apply layout %s", want), ConditionReason: config.ReasonMIGPending}
		default:
			return gate.Result{Reason: fmt.Sprintf("MIG layout %s is being applied (state %s): %s", want, state, msg), ConditionReason: config.ReasonMIGPending}
		}
	}
}
