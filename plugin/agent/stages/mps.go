package stages

import (
	"errors"
	"fmt"
	"io/fs"

	"github.com/gpupolicy/gpupolicy/plugin/agent/gate"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// MPSCheck is ready when the node's pool does not share GPUs with MPS, or the MPS control
// daemon records that it serves the pool's config (resource, replicas) and its control pipe is
// in the pipe directory: the device plugin hands out MPS replicas only then. Until the daemon
// has run the check is pending; a node the daemon cannot serve (its record's reason: a GPU in
// MIG mode, no tmpfs, no control program) is not ready with that reason.
func MPSCheck(cfg *config.Agent) gate.CheckFunc {
	return func(f *gate.Facts) gate.Result {
		dp := cfg.PoolFor(f.Node.Labels)
		if dp.Sharing.MPS == nil {
			return gate.Result{Ready: true, Reason: "the node's pool does not share GPUs with MPS"}
		}
		h := f.Host
		if h.MPSErr != nil {
			if errors.Is(h.MPSErr, fs.ErrNotExist) {
				return gate.Result{Reason: h.MPSErr.Error(), ConditionReason: config.ReasonMPSPending, Pending: true}
			}
			return gate.Result{Reason: h.MPSErr.Error(), ConditionReason: config.ReasonMPSNotReady}
		}
		if err := h.MPS.Serves(dp); err != nil {
			if h.MPS.Ready { // serving another config: the daemon's pod has not restarted yet
				return gate.Result{Reason: err.Error(), ConditionReason: config.ReasonMPSPending, Pending: true}
			}
			return gate.Result{Reason: err.Error(), ConditionReason: config.ReasonMPSNotReady}
		}
		if h.MPSPipeErr != nil {
			return gate.Result{Reason: h.MPSPipeErr.Error(), ConditionReason: config.ReasonMPSNotReady}
		}
		return gate.Result{Ready: true, Reason: fmt.Sprintf("the MPS control daemon serves %s with %d replicas on %d GPUs (active threads %d%% per client)",
			h.MPS.Resource, h.MPS.Replicas, len(h.MPS.GPUs), h.MPS.ActiveThreadPercentage)}
	}
}
