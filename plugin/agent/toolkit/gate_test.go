package toolkit_test

import (
	"context"

	"github.com/gpupolicy/gpupolicy/plugin/agent/stages"
	"github.com/gpupolicy/gpupolicy/plugin/agent/toolkit"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

func init() {
	toolkit.GateCheck = func(hostRoot, sha string) (bool, string) {
		cfg := &config.Agent{Toolkit: config.AgentToolkit{RuntimeClassName: "nvidia", DropInSHA256: sha}}
		res := stages.ToolkitCheck(cfg, hostRoot)(context.Background())
		return res.Ready, res.Reason
	}
}
