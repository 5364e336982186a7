package config

import (
	"fmt"
	"slices"
)

// NVIDIA's GPU Operator labels GPU nodes with the same nvidia.com/gpu.deploy.* keys as the
// stage gates, and runs its own DaemonSets behind them. Until a node is handed over, gpupolicy
// must neither open gates there (its DaemonSets would run beside the operator's: two drivers,
// two toolkits rewriting containerd, two device plugins) nor close them (the operator's
// operands would leave the node). The keys and their meaning are the operator's
// (controllers/state_manager.go in github.com/NVIDIA/gpu-operator; a test reads that file).
const (
	// LabelOperatorValidator is set on every GPU node the operator manages for container
	// workloads. No gpupolicy stage writes it, so its presence marks the operator's nodes, and
	// the gated DaemonSets require it absent.
	LabelOperatorValidator = LabelDeployPrefix + "operator-validator"
	// LabelOperatorOperands "false" is the operator's own switch to take its operands off a
	// node (it then removes its gpu.deploy labels there). gpupolicy reads it as the node's
	// hand-over: the agent removes the operator-only labels and runs its own stages.
	LabelOperatorOperands = LabelDeployPrefix + "operands"

	// ReasonGPUOperatorManaged is the GPUStackReady reason while the operator manages a node.
	ReasonGPUOperatorManaged = "GPUOperatorManaged"

	// AnnotationAdoptedGates lists (comma-separated, sorted) the gate labels the operator left
	// open on a node at hand-over and the agent keeps open while gpupolicy's own stage behind
	// them has not run there yet (its check is pending, not failed): the operator's driver,
	// toolkit and device plugin keep working until gpupolicy's verify the node, so running and
	// new GPU pods never see a node without a device plugin. The agent removes it once its own
	// verdicts hold every gate, or a check fails.
	AnnotationAdoptedGates = ManagedPrefix + "gpu.adopted-gates"
)

// OperatorOnlyLabels are the operator's gpu.deploy labels of operands gpupolicy has no stage
// for (validator, DCGM, node status exporter, and the sandbox workloads' managers), sorted.
// At hand-over the agent removes them; the operator's other labels are gpupolicy's own gates
// (StageLabels), which the agent adopts and sets to its own verdicts.
var OperatorOnlyLabels = []string{
	LabelDeployPrefix + "cc-manager",
	LabelDeployPrefix + "dcgm",
	LabelDeployPrefix + "kata-manager",
	LabelDeployPrefix + "node-status-exporter",
	LabelOperatorValidator,
	LabelDeployPrefix + "sandbox-device-plugin",
	LabelDeployPrefix + "sandbox-validator",
	LabelDeployPrefix + "vfio-manager",
	LabelDeployPrefix + "vgpu-device-manager",
	LabelDeployPrefix + "vgpu-manager",
}

// The operator's driver upgrade controller keeps its state on every node it manages (the
// k8s-operator-libs state label, and the operator's opt-in annotation). gpupolicy's upgrade
// slots drive upgrades after the hand-over, so the agent removes both with the operator-only
// labels; a reinstalled operator writes them again.
const (
	OperatorUpgradeStateLabel = "nvidia.com/gpu-driver-upgrade-state"
	OperatorUpgradeAnnotation = "nvidia.com/gpu-driver-upgrade-enabled"
)

// OperatorState is how the GPU Operator stands on one node.
type OperatorState int

const (
	// OperatorAbsent: the node carries no operator-only label.
	OperatorAbsent OperatorState = iota
	// OperatorManaged: the operator's labels are on the node and nobody handed it over.
	OperatorManaged
	// OperatorHandedOver: operator-only labels remain, but the operands switch is "false";
	// the agent removes them and takes the node.
	OperatorHandedOver
)

// Operator says how the GPU Operator stands on a node with these labels, and why in words.
func Operator(labels map[string]string) (OperatorState, string) {
	var left []string
	for _, l := range OperatorOnlyLabels {
		if _, ok := labels[l]; ok {
			left = append(left, l)
		}
	}
	switch {
	case len(left) == 0:
		return OperatorAbsent, ""
	case labels[LabelOperatorOperands] == GateOptOut:
		return OperatorHandedOver, fmt.Sprintf("%s=false: handed over by a person; the GPU Operator's labels %v are left to remove", LabelOperatorOperands, left)
	}
	mark := left[0]
	if slices.Contains(left, LabelOperatorValidator) {
		mark = LabelOperatorValidator
	}
	return OperatorManaged, fmt.Sprintf("the GPU Operator manages this node (label %s=%s): gpupolicy holds its gates and leaves containerd alone until the node is handed over with %s=false (README: Coming from the GPU Operator)",
		mark, labels[mark], LabelOperatorOperands)
}
