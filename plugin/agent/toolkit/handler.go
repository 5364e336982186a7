package toolkit

// The runtime handler the drop-in defines runs runc through nvidia-container-runtime, so it
// must run runc the way the node's own runc runtime does: a node whose kubelet uses the
// systemd cgroup driver has SystemdCgroup = true there, and a handler without it starts its
// pods' sandboxes with cgroupfs paths that the kubelet does not expect. `nvidia-ctk runtime
// configure` (nvidia-container-toolkit v1.20.2, pkg/config/engine/containerd) starts the
// nvidia runtime from a copy of the node's low-level runtime and sets BinaryName on top; the
// installer does the same with the node's effective configuration.

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// runcShim is the containerd shim whose options (BinaryName, SystemdCgroup, ...) configure a
// runc-compatible binary: the only kind of runtime nvidia-container-runtime can stand in for.
const runcShim = "io.containerd.runc.v2"

// lowLevelRuntime picks the node runtime whose settings a handler inherits, as nvidia-ctk's
// engine.GetLowLevelRuntimes orders them: the default runtime unless it is an nvidia* one,
// then runc, then crun. Unlike nvidia-ctk it passes over a runtime of another shim (a default
// runtime of Kata or gVisor): its options belong to that shim, and nvidia-ctk's copy would
// make the handler run Kata with runc's BinaryName. It returns "" when the node has none.
func lowLevelRuntime(cri table) (string, table) {
	ctr := subTable(cri, "containerd")
	runtimes := subTable(ctr, "runtimes")
	var candidates []string
	if d, _ := ctr["default_runtime_name"].(string); d != "" && !strings.HasPrefix(d, "nvidia") {
		candidates = append(candidates, d)
	}
	for _, name := range append(candidates, "runc", "crun") {
		rt, ok := runtimes[name].(table)
		if !ok {
			continue
		}
		if typ, _ := rt["runtime_type"].(string); typ == "" || typ == runcShim {
			return name, rt
		}
	}
	return "", nil
}

// copyTable is a deep copy of t (tables copied, other values shared: TOML scalars and
// arrays are never changed in place here).
func copyTable(t table) table { return deepMerge(table{}, t) }

// inheritHandlers returns rendered with every runtime handler it defines replaced by a copy of
// the node's low-level runtime (from plugins, the node's effective plugin tables without our
// drop-in) with the rendered keys on top, and the name of the runtime copied ("" when the node
// defines none: containerd's defaults then apply to both, and nothing is inherited). A handler
// the node already defines is replaced, not merged, as nvidia-ctk replaces it.
//
// fromDump says plugins came from `containerd config dump`, which always lists containerd's
// own runc runtime: if it names no runc-based runtime at all, this node's runc settings cannot
// be known and the install is refused before anything is written.
func inheritHandlers(rendered, plugins table, configVersion int, fromDump bool) (table, string, error) {
	pluginName := config.CRIRuntimePlugin(configVersion)
	handlers := subTable(subTable(subTable(subTable(rendered, "plugins"), pluginName), "containerd"), "runtimes")
	if len(handlers) == 0 {
		return rendered, "", nil
	}
	cri := subTable(plugins, pluginName)
	source, base := lowLevelRuntime(cri)
	if source == "" && fromDump {
		ctr := subTable(cri, "containerd")
		names := slices.Sorted(maps.Keys(subTable(ctr, "runtimes")))
		return nil, "", fmt.Errorf("containerd's effective configuration (config dump) has no runc-based runtime to take the node's runc settings from (default_runtime_name %q, runtimes %v, none named runc or crun with runtime_type %s): the %s handler would not run runc as the node does (SystemdCgroup); define the node's runc runtime in %s and retry",
			ctr["default_runtime_name"], names, runcShim, strings.Join(slices.Sorted(maps.Keys(handlers)), ", "), pluginName)
	}
	out := copyTable(rendered)
	outHandlers := subTable(subTable(subTable(subTable(out, "plugins"), pluginName), "containerd"), "runtimes")
	for name, h := range handlers {
		ht, _ := h.(table)
		outHandlers[name] = deepMerge(copyTable(base), ht)
	}
	return out, source, nil
}
