package toolkit_test

import (
	"github.com/gpupolicy/gpupolicy/plugin/agent/gate"
	"github.com/gpupolicy/gpupolicy/plugin/agent/stages"
	"github.com/gpupolicy/gpupolicy/plugin/agent/toolkit"
	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/nodefacts/hostfacts"
)

func init() {
	toolkit.GateCheck = func(hostRoot, sha string) (bool, string) {
		cfg := &config.Agent{Toolkit: config.AgentToolkit{RuntimeClassName: "nvidia", DropInSHA256: sha}}
		res := stages.ToolkitCheck(cfg)(&gate.Facts{Host: hostfacts.Read(hostRoot)})
		return res.Ready, res.Reason
	}
}
