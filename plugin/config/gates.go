package config

// Stage names, in order. Each stage's DaemonSet requires its deploy label In [true]; the
// driver and toolkit stages are also the agent's checks (GateChecks) and the keys of its
// gate-status annotation.
const (
	StageDriver           = "driver"
	StageToolkit          = "container-toolkit"
	StageDevicePlugin     = "device-plugin"
	StageFeatureDiscovery = "gpu-feature-discovery"
	StageExporter         = "dcgm-exporter"
)

// GateToolkitReady names the LabelToolkitReady gate: it opens with the toolkit stage's
// downstream gates but admits no DaemonSet (the RuntimeClass selects on it).
const GateToolkitReady = "toolkit-ready"

// GateValue of an open gate. A gate label set to "false" by a person is an opt-out the agent
// never overwrites; an absent label is a closed gate the agent may open.
const (
	GateOpen   = "true"
	GateOptOut = "false"
)

// Gate is one node label gate of the stage table.
type Gate struct {
	// Name is the stage the label admits, or GateToolkitReady; doctor reports gates by it.
	Name  string
	Label string
	// OpenedBy is the agent check (one of GateChecks) whose pass opens the label; "" opens it
	// on entry, when the node matches the policy's entry selector.
	OpenedBy string
	// EnabledBy says whether the policy enables an optional stage; nil for the stages every
	// policy has. A disabled stage's label is never opened.
	EnabledBy func(Stages) bool
}

// Enabled reports whether the policy's stages enable g.
func (g Gate) Enabled(s Stages) bool { return g.EnabledBy == nil || g.EnabledBy(s) }

// Gates is the stage/gate table, in the order the agent opens the labels. The agent builds
// its stage checks from it (plugin/agent/stages) and doctor judges a node's labels by it
// (fn/doctor), so the two cannot disagree on the order or on which check opens a label.
// Read-only.
var Gates = []Gate{
	{Name: StageDriver, Label: LabelDeployDriver},
	{Name: StageToolkit, Label: LabelDeployToolkit, OpenedBy: StageDriver},
	{Name: GateToolkitReady, Label: LabelToolkitReady, OpenedBy: StageToolkit},
	{Name: StageDevicePlugin, Label: LabelDeployDevicePlugin, OpenedBy: StageToolkit},
	{Name: StageFeatureDiscovery, Label: LabelDeployFeatureDiscovery, OpenedBy: StageToolkit,
		EnabledBy: func(s Stages) bool { return s.FeatureDiscovery }},
	{Name: StageExporter, Label: LabelDeployExporter, OpenedBy: StageToolkit,
		EnabledBy: func(s Stages) bool { return s.Exporter }},
}

// GateChecks are the agent's stage checks in the order it runs them: a label is open iff the
// check that opens it (Gate.OpenedBy) and every check before it passed. Read-only.
var GateChecks = []string{StageDriver, StageToolkit}

// GateLabels are the labels of the enabled gates that check openedBy opens ("": on entry), in
// table order.
func GateLabels(openedBy string, s Stages) []string {
	var out []string
	for _, g := range Gates {
		if g.OpenedBy == openedBy && g.Enabled(s) {
			out = append(out, g.Label)
		}
	}
	return out
}

// DisabledGateLabels are the labels of the stages the policy disables, in table order.
func DisabledGateLabels(s Stages) []string {
	var out []string
	for _, g := range Gates {
		if !g.Enabled(s) {
			out = append(out, g.Label)
		}
	}
	return out
}
