package config

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// Stage names, in order. Each stage's DaemonSet requires its deploy label In [true]; the
// driver, toolkit and MIG stages are also the agent's checks (the rows with Check,
// EnabledChecks) and the keys of its gate-status annotation.
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

// Rollout stages: where a stage's objects go in the rendered tree, applied in this order as
// Argo CD sync waves (prereqs -1, driver 0, ...) or as Flux Kustomizations that depend on the
// one before. Prereqs (namespace, RBAC, ConfigMaps, the node agent, discovery) has no gate.
const (
	RolloutPrereqs       = "prereqs"
	RolloutDriver        = "driver"
	RolloutToolkit       = "container-toolkit"
	RolloutDevicePlugin  = "device-plugin"
	RolloutObservability = "observability"
)

// DaemonSet names of the stages (a node pool's own DaemonSet is "<name>-<pool>").
const (
	DaemonSetDriver           = DriverDaemonSetName
	DaemonSetToolkit          = "gpu-container-toolkit"
	DaemonSetMIGManager       = "gpu-mig-manager"
	DaemonSetDevicePlugin     = "gpu-device-plugin"
	DaemonSetDRAPlugin        = "gpu-dra-plugin"
	DaemonSetFeatureDiscovery = "gpu-feature-discovery"
	DaemonSetExporter         = "gpu-exporter"
)

// Gate is one row of the stage table: a step of the GPU stack on a node, its node label gate,
// when it is opened and enabled, where its objects roll out, its DaemonSets, what doctor says
// when it is closed and how its pods' readiness is judged.
type Gate struct {
	// Name is the stage the label admits, or GateToolkitReady; doctor reports gates by it, and
	// for a check (Check) it is the check's name in the gate-status annotation.
	Name  string
	Label string
	// OpenedBy is the check (a row with Check) whose pass opens the label; "" opens it on
	// entry, when the node matches the policy's entry selector. When that check's row is
	// disabled by the policy, the nearest enabled check before it opens the label instead.
	OpenedBy string
	// EnabledBy says whether the policy enables an optional stage; nil for the stages every
	// policy has. A disabled stage's label is never opened (the agent keeps it closed).
	// EnabledWhen says the same in the policy's words, for the docs.
	EnabledBy   func(Stages) bool
	EnabledWhen string
	// Check: the agent runs a check of this stage on the node (plugin/agent/stages), whose
	// pass opens the labels of the rows OpenedBy it.
	Check bool
	// Rollout is the rollout stage of its DaemonSets; "" for a gate without one.
	Rollout string
	// DaemonSets are the DaemonSets the gate admits; with PerPool a node pool may have its
	// own, "<name>-<pool>".
	DaemonSets []string
	PerPool    bool
	// OnDelete: its DaemonSets replace a pod only when it is deleted (the driver: a new pod
	// unloads the driver under running jobs, so the agent's upgrade deletes it after a drain).
	// The rollout then judges the stage by its pods' readiness, not by updated pods.
	OnDelete bool
	// Fix is what doctor tells a person whose node fails this row's check: placeholders
	// {node}, {onNode} (the kubectl command listing the node's stack pods), {runtimeClass}
	// and {statusFile}. Only rows with Check have one; EntryFix is the entry's.
	Fix string
	// Health is how the rollout judges the DaemonSets' pods (the README's stage table).
	Health string
}

// EntryFix is doctor's fix for a node the agent has not admitted (its entry gate closed):
// placeholders {node}, {onNode} and {entry} (the policy's entry selector).
const EntryFix = "the node agent has not admitted {node}: check that it carries the entry labels {entry} and that a gpu-node-agent pod runs there ({onNode})"

// Enabled reports whether the policy's stages enable g.
func (g Gate) Enabled(s Stages) bool { return g.EnabledBy == nil || g.EnabledBy(s) }

// FixFor fills g.Fix's placeholders (EntryFix's too) from vars ("node" → value).
func FixFor(text string, vars map[string]string) string {
	pairs := make([]string, 0, 2*len(vars))
	for k, v := range vars {
		pairs = append(pairs, "{"+k+"}", v)
	}
	return strings.NewReplacer(pairs...).Replace(text)
}

// Gates is the stage table, in the order the agent opens the labels: the agent builds its
// stage checks from it (plugin/agent/stages), doctor judges a node's labels and says what to
// do by it (fn/doctor), and the renderer takes each stage's DaemonSet names and rollout stage
// from it (fn/render), so none of them can disagree on the order, on which check opens a
// label, or on where a stage's DaemonSet goes. Read-only.
var Gates = []Gate{
	{Name: StageDriver, Label: LabelDeployDriver, Check: true, Rollout: RolloutDriver,
		DaemonSets: []string{DaemonSetDriver}, PerPool: true, OnDelete: true,
		Fix:    "make the driver on {node} pass the agent's check (reason above); the gpu-driver pod there shows why ({onNode})",
		Health: "preinstalled: the validator's /readyz, 200 once it checked the node whatever the verdict (which goes to the gates, GPUStackReady and Events); container: NVIDIA's image, nvidia-smi answers (startup probe up to 30 min)"},
	{Name: StageToolkit, Label: LabelDeployToolkit, OpenedBy: StageDriver, Check: true, Rollout: RolloutToolkit,
		DaemonSets: []string{DaemonSetToolkit}, PerPool: true,
		Fix:    "containerd on {node} has no verified {runtimeClass} handler yet: see the gpu-container-toolkit pod there ({onNode}) and its toolkit-status file {statusFile}",
		Health: "running (no probe): toolkit install --watch keeps running and retrying a failed install"},
	{Name: GateToolkitReady, Label: LabelToolkitReady, OpenedBy: StageToolkit},
	{Name: StageMIGManager, Label: LabelDeployMIGManager, OpenedBy: StageToolkit, Check: true, Rollout: RolloutToolkit,
		EnabledBy: func(s Stages) bool { return s.MIG }, EnabledWhen: "a node pool declares `mig` layouts",
		DaemonSets: []string{DaemonSetMIGManager},
		Fix:        "the MIG step has not applied {node}'s layout: see its nvidia.com/mig.config.state label and the gpu-mig-manager pod there ({onNode})",
		Health:     "running (no probe): gpu-node-agent mig keeps running and re-applies when the node's nvidia.com/mig.config label changes"},
	{Name: StageMPSControlDaemon, Label: LabelDeployMPSControlDaemon, OpenedBy: StageMIGManager, Check: true, Rollout: RolloutDevicePlugin,
		EnabledBy: func(s Stages) bool { return s.MPS }, EnabledWhen: "`devicePlugin.sharing.mps` (spec or a node pool)",
		DaemonSets: []string{DaemonSetMPSControlDaemon}, PerPool: true,
		Fix:    "the MPS control daemon on {node} is not serving its pool's GPUs yet: its record " + MPSHostRoot + "/" + MPSStatusFileName + " and the gpu-mps-control-daemon pod there say why ({onNode})",
		Health: "/readyz once the daemon has judged the node (its verdict goes to the gate through its record); /healthz: the MPS control daemon answers on its pipe"},
	{Name: StageDevicePlugin, Label: LabelDeployDevicePlugin, OpenedBy: StageMPSControlDaemon, Rollout: RolloutDevicePlugin,
		DaemonSets: []string{DaemonSetDevicePlugin, DaemonSetDRAPlugin}, PerPool: true,
		Health: "running (no probe); a GPU the plugin finds unhealthy is reported to the kubelet"},
	{Name: StageFeatureDiscovery, Label: LabelDeployFeatureDiscovery, OpenedBy: StageMPSControlDaemon, Rollout: RolloutObservability,
		EnabledBy: func(s Stages) bool { return s.FeatureDiscovery }, EnabledWhen: "`featureDiscovery.enabled`",
		DaemonSets: []string{DaemonSetFeatureDiscovery},
		Health:     "running (no probe)"},
	{Name: StageExporter, Label: LabelDeployExporter, OpenedBy: StageMPSControlDaemon, Rollout: RolloutObservability,
		EnabledBy: func(s Stages) bool { return s.Exporter }, EnabledWhen: "`exporter.enabled`",
		DaemonSets: []string{DaemonSetExporter},
		Health:     "/readyz once XID events are registered and the first NVML snapshot is taken; /healthz liveness"},
}

// GateByName is the table's row of stage name; ok is false when there is none.
func GateByName(name string) (Gate, bool) {
	for _, g := range Gates {
		if g.Name == name {
			return g, true
		}
	}
	return Gate{}, false
}

// Opener is the check that opens g's label under the policy's stages: g.OpenedBy, or when
// that check's stage is disabled, the nearest enabled check before it ("" for entry).
func (g Gate) Opener(s Stages) string {
	opener := g.OpenedBy
	for opener != "" {
		row, _ := GateByName(opener)
		if row.Enabled(s) {
			return opener
		}
		opener = row.OpenedBy
	}
	return ""
}

// EnabledChecks are the checks the agent runs under the policy's stages, in order.
func EnabledChecks(s Stages) []string {
	var out []string
	for _, g := range Gates {
		if g.Check && g.Enabled(s) {
			out = append(out, g.Name)
		}
	}
	return out
}

// GateLabels are the labels of the enabled gates that check openedBy opens ("": on entry)
// under the policy's stages, in table order.
func GateLabels(openedBy string, s Stages) []string {
	var out []string
	for _, g := range Gates {
		if g.Enabled(s) && g.Opener(s) == openedBy {
			out = append(out, g.Label)
		}
	}
	return out
}

// LabelsOpenedBy are the labels of every row the check stage opens in the table (enabled or
// not), and of the rows the checks after it open, in table order: the programs behind the MIG
// step's are the ones holding NVML handles (the MPS control daemon, whose check the MIG step's
// opens, and the device plugin behind it among them).
func LabelsOpenedBy(stage string) []string {
	var out []string
	for _, g := range Gates {
		for opener := g.OpenedBy; opener != ""; {
			if opener == stage {
				out = append(out, g.Label)
				break
			}
			row, _ := GateByName(opener)
			opener = row.OpenedBy
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

// OnDeleteRollout reports whether the rollout stage holds an OnDelete DaemonSet.
func OnDeleteRollout(rollout string) bool {
	return slices.ContainsFunc(Gates, func(g Gate) bool { return g.Rollout == rollout && g.OnDelete })
}

// RolloutStages are the rollout stages in order: prereqs, then the table's, first seen first.
func RolloutStages() []string {
	out := []string{RolloutPrereqs}
	for _, g := range Gates {
		if g.Rollout != "" && !slices.Contains(out, g.Rollout) {
			out = append(out, g.Rollout)
		}
	}
	return out
}

// StageTableMarkdown is the stage table as the README shows it (between its stage-table
// markers; a test keeps the two equal).
func StageTableMarkdown() string {
	var b strings.Builder
	b.WriteString("| stage | gate label | opened by the agent's check of | enabled | rollout stage | DaemonSets | Ready means |\n")
	b.WriteString("|---|---|---|---|---|---|---|\n")
	for _, g := range Gates {
		opener := "entry (the node matches the entry selector)"
		if g.OpenedBy != "" {
			opener = "`" + g.OpenedBy + "`"
			if row, _ := GateByName(g.OpenedBy); row.EnabledBy != nil {
				opener += " (else the check before it)"
			}
		}
		enabled := cmp.Or(g.EnabledWhen, "always")
		rollout, daemonSets, health := "—", "—", "—"
		if g.Rollout != "" {
			pool := ""
			if g.PerPool {
				pool = "[-<pool>]"
			}
			rollout = "`" + g.Rollout + "`"
			daemonSets = "`" + strings.Join(g.DaemonSets, pool+"`, `") + pool + "`"
			health = g.Health
		}
		fmt.Fprintf(&b, "| `%s` | `%s` | %s | %s | %s | %s | %s |\n", g.Name, g.Label, opener, enabled, rollout, daemonSets, health)
	}
	return b.String()
}
