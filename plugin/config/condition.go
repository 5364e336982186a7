package config

// ConditionGPUStackReady is the Node condition the gate keeps true to the stage labels, so
// `kubectl describe node` says why a node's stack is held back. It is the only status field
// the agent writes (nodes/status) and the only one the guardrails let it change.
const ConditionGPUStackReady = "GPUStackReady"

// Reasons of the GPUStackReady condition: StackReady when every stage is verified, otherwise
// the first failing stage's.
const (
	ReasonStackReady           = "StackReady"
	ReasonOptedOut             = "OptedOut"
	ReasonDriverNotLoaded      = "DriverNotLoaded"
	ReasonDriverDrift          = "DriverDrift"
	ReasonDriverNotReady       = "DriverNotReady"
	ReasonToolkitNotLoaded     = "ToolkitNotLoaded"
	ReasonToolkitInstallFailed = "ToolkitInstallFailed"
)
