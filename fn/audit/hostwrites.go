package audit

import (
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// hostWrites lists what a container changes on the host. A read-write hostPath allows writing
// anything under it, so each is listed; for this project's own programs the files they actually
// write are known from their command line and the agent configuration, and are listed first.
func hostWrites(c *corev1.Container, a Container, idx *index) []Write {
	var out []Write
	argv := append(append([]string{}, c.Command...), c.Args...)
	if isToolkitInstall(argv) {
		cr := idx.agentRuntime()
		dropIn := path.Join(cr.DropInDir, path.Base(flagValue(argv, "--drop-in", config.DropInDir+"/"+config.DropInFile)))
		reason := "the containerd drop-in that adds the nvidia runtime handler (atomic write; containerd is restarted"
		if mode := flagValue(argv, "--restart-mode", cr.RestartMode); mode != "" {
			reason += " via " + mode
		}
		out = append(out,
			Write{Path: dropIn, Reason: reason + " only when the bytes change)"},
			Write{Path: config.ToolkitStatusFile, Reason: "toolkit status read by the node agent's gate"},
		)
	}
	known := map[string]bool{}
	for _, w := range out {
		known[w.Path] = true
	}
	for _, h := range a.HostPaths {
		if !h.ReadOnly && !known[h.Path] {
			out = append(out, Write{Path: h.Path, Reason: "read-write hostPath mounted at " + h.MountPath + ": anything under it can be written"})
		}
	}
	return out
}

func isToolkitInstall(argv []string) bool {
	joined := " " + strings.Join(argv, " ") + " "
	return strings.Contains(joined, "gpu-node-agent") && strings.Contains(joined, " toolkit install ")
}

// flagValue returns the value of --name V or --name=V in argv, or def.
func flagValue(argv []string, name, def string) string {
	for i, a := range argv {
		if a == name && i+1 < len(argv) {
			return argv[i+1]
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return def
}

// agentRuntime is the containerRuntime section of the rendered agent configuration, or the
// contract's defaults when the tree has none.
func (idx *index) agentRuntime() config.ContainerRuntime {
	cr := config.ContainerRuntime{
		ConfigPath: v1alpha1.DefaultConfigPath, DropInDir: v1alpha1.DefaultDropInDir, RestartMode: v1alpha1.DefaultRestartMode,
	}
	for _, cm := range idx.configMaps {
		if cm.Name != config.AgentConfigMap {
			continue
		}
		var agent config.Agent
		if yaml.Unmarshal([]byte(cm.Data[config.AgentConfigFile]), &agent) == nil && agent.ContainerRuntime.DropInDir != "" {
			cr = agent.ContainerRuntime
		}
	}
	return cr
}

// joinHost is the host path a mount sees, subPath included.
func joinHost(p, sub string) string {
	if sub == "" {
		return p
	}
	return path.Join(p, sub)
}
