package config

// MIG: the layouts the function renders (mig-parted's format, one file per node pool in
// ConfigMap MIGConfigMap) and what the node agent's MIG step reports on the node.
const (
	MIGConfigMap = "gpu-mig-config" // key "<pool>.yaml" (MIGConfigFile) for each pool with MIG
	MIGConfigDir = "/etc/gpupolicy/mig"

	// LabelDeployMIGManager admits the MIG step (`gpu-node-agent mig`) on a node whose pool
	// declares MIG; the gate opens it with the toolkit stage (the step needs NVML).
	LabelDeployMIGManager = LabelDeployPrefix + "mig-manager"
	// StageMIGManager is the stage (and gate check, Gates) that holds the device-plugin,
	// feature-discovery and exporter gates shut until the node's MIG layout is applied.
	StageMIGManager = "mig-manager"

	// AnnotationMIGApplied is the layout the MIG step last applied in full; with
	// LabelMIGConfigState=success it is what the gate reopens the downstream gates on.
	AnnotationMIGApplied = "nvidia.com/mig.config.applied"
	// AnnotationMIGMessage says why the state is what it is (the pods that hold a GPU, the
	// GPU that needs a reset, NVML's error), in words.
	AnnotationMIGMessage = "nvidia.com/mig.config.message"
	// AnnotationMIGPendingSince is "<layout> <RFC 3339 time>": when the MIG step began
	// applying layout, so its timeout holds across restarts of the step.
	AnnotationMIGPendingSince = "nvidia.com/mig.config.pending-since"

	// MIGAppliedFile is written under the host root by the MIG step after it repartitioned the
	// GPUs: the toolkit stage watches it and regenerates the CDI spec, whose MIG device names
	// (MIG UUIDs) changed; the step reports success only once the spec names them.
	MIGAppliedFile = "/var/lib/gpupolicy/mig-applied.json"
)

// GPU Operator's values of LabelMIGConfigState.
const (
	MIGStatePending   = "pending"
	MIGStateRebooting = "rebooting"
	MIGStateSuccess   = "success"
	MIGStateFailed    = "failed"
)

// Reasons of the GPUStackReady condition while the MIG step holds the node.
const (
	ReasonMIGPending      = "MIGPending"
	ReasonMIGRebooting    = "MIGRebooting"
	ReasonMIGConfigFailed = "MIGConfigFailed"
)

// MIGConfigFile is the key of pool's layouts in MIGConfigMap.
func MIGConfigFile(pool string) string { return pool + ".yaml" }

// AgentMIG is a node pool's MIG settings as the agent needs them.
type AgentMIG struct {
	// Layout is the pool's layout; a node's LabelMIGConfig may name another of Layouts.
	Layout string `json:"layout"`
	// Layouts are the declared layout names, sorted.
	Layouts []string `json:"layouts"`
	// ConfigFile is the pool's file in MIGConfigMap (mounted at MIGConfigDir).
	ConfigFile string `json:"configFile"`
	// GPUProduct is the model the layouts were checked for (the pool's gpuProduct, a
	// LabelGPUProduct value); the step changes no GPU of another model. "": not checked.
	GPUProduct string `json:"gpuProduct,omitempty"`
}

// MIGFor is the MIG settings of the pool a node with these labels is in, or nil.
func (cfg *Agent) MIGFor(nodeLabels map[string]string) (*AgentMIG, string) {
	for _, p := range cfg.NodePools {
		if MatchesNodeSelector(nodeLabels, p.NodeSelector) {
			return p.MIG, p.Name
		}
	}
	return nil, ""
}

// WantedLayout is the layout a node should run: its LabelMIGConfig when set, else the
// pool's. ok is false when the label names a layout the policy does not declare.
func (m *AgentMIG) WantedLayout(nodeLabels map[string]string) (layout string, fromLabel, ok bool) {
	v, set := nodeLabels[LabelMIGConfig]
	if !set || v == "" {
		return m.Layout, false, true
	}
	for _, l := range m.Layouts {
		if l == v {
			return v, true, true
		}
	}
	return v, true, false
}
