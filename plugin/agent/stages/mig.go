package stages

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpupolicy/gpupolicy/plugin/agent/gate"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// NodeFunc reads this agent's Node.
type NodeFunc func(ctx context.Context) (*corev1.Node, error)

// WithMIG puts the MIG step between the toolkit and the device plugin when the policy declares
// MIG layouts: the toolkit check opens nvidia.com/gpu.deploy.mig-manager (the step needs NVML)
// and a mig-manager check, ready once the node's layout is applied, opens the device-plugin,
// feature-discovery and exporter gates. So those gates close before the step repartitions the
// GPUs, reopen after, and stay closed with the reason while the layout is pending, needs a
// reset or failed. Without MIG layouts checks are returned as they are.
func WithMIG(checks []gate.StageCheck, cfg *config.Agent, node NodeFunc) []gate.StageCheck {
	if !cfg.Stages.MIG {
		return checks
	}
	i := slices.IndexFunc(checks, func(c gate.StageCheck) bool { return c.Stage == config.StageToolkit })
	if i < 0 {
		return checks
	}
	out := slices.Clone(checks)
	var toolkit, downstream []string
	for _, l := range out[i].Opens {
		if l == config.LabelToolkitReady {
			toolkit = append(toolkit, l)
		} else {
			downstream = append(downstream, l)
		}
	}
	out[i].Opens = append(toolkit, config.LabelDeployMIGManager)
	migCheck := gate.StageCheck{Stage: config.StageMIGManager, Opens: downstream, Check: MIGCheck(cfg, node)}
	return slices.Insert(out, i+1, migCheck)
}

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
