package stages

import (
	"slices"

	"github.com/gpupolicy/gpupolicy/plugin/agent/gate"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// poolDriverCheck is the driver check. When some pool declares its own driver
// (spec.nodePools[].driver) it holds the node to its pool's: the pool is read from the Node's
// labels on every check, so a node moved between pools is judged by its new pool at once.
func poolDriverCheck(cfg *config.Agent) gate.CheckFunc {
	if !slices.ContainsFunc(cfg.NodePools, func(p config.AgentPool) bool { return p.Driver != nil }) {
		return DriverCheck(cfg)
	}
	return func(f *gate.Facts) gate.Result {
		want, _ := cfg.DriverFor(f.Node.Labels)
		pooled := *cfg
		pooled.Driver = want
		return DriverCheck(&pooled)(f)
	}
}
