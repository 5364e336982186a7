package stages

import (
	"fmt"

	"github.com/gpupolicy/gpupolicy/plugin/agent/gate"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// MIGCheck is ready when the node's pool declares no MIG layout, or the MIG step reported
// success for the layout the node should run (its nvidia.com/mig.config label, else the
// pool's); otherwise its reason is the step's state and message.
func MIGCheck(cfg *config.Agent) gate.CheckFunc {
	return func(f *gate.Facts) gate.Result {
		n := f.Node
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
