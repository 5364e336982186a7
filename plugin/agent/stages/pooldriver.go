package stages

import (
	"context"
	"slices"

	"github.com/gpupolicy/gpupolicy/plugin/agent/gate"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// poolDriverCheck is the driver check. When some pool declares its own driver
// (spec.nodePools[].driver) it holds the node to its pool's: the pool is read from the Node's
// labels on every check, so a node moved between pools is judged by its new pool at once.
func poolDriverCheck(cfg *config.Agent, hostRoot string, node NodeFunc) gate.CheckFunc {
	if !slices.ContainsFunc(cfg.NodePools, func(p config.AgentPool) bool { return p.Driver != nil }) {
		return DriverCheck(cfg, hostRoot)
	}
	return func(ctx context.Context) gate.Result {
		n, err := node(ctx)
		if err != nil {
			return gate.Result{Reason: "reading the Node for its pool's driver: " + err.Error(), ConditionReason: config.ReasonDriverNotReady}
		}
		want, _ := cfg.DriverFor(n.Labels)
		pooled := *cfg
		pooled.Driver = want
		return DriverCheck(&pooled, hostRoot)(ctx)
	}
}
