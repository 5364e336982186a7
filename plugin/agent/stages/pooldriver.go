package stages

import (
	"context"
	"slices"

	"github.com/gpupolicy/gpupolicy/plugin/agent/gate"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// WithPoolDrivers makes the driver check hold the node to its pool's own driver
// (spec.nodePools[].driver) when some pool declares one: the pool is read from the Node's
// labels on every check, so a node moved between pools is judged by its new pool at once.
// Without pool drivers checks are returned as they are.
func WithPoolDrivers(checks []gate.StageCheck, cfg *config.Agent, hostRoot string, node NodeFunc) []gate.StageCheck {
	if !slices.ContainsFunc(cfg.NodePools, func(p config.AgentPool) bool { return p.Driver != nil }) {
		return checks
	}
	out := slices.Clone(checks)
	for i := range out {
		if out[i].Stage != config.StageDriver {
			continue
		}
		out[i].Check = func(ctx context.Context) gate.Result {
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
	return out
}
