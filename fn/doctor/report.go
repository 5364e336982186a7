package doctor

import "github.com/gpupolicy/gpupolicy/plugin/config"

// Severity of a finding. Errors keep a node or pod from working; warnings deserve a look.
const (
	SeverityError   = "error"
	SeverityWarning = "warning"
)

// Finding is one diagnosis with the one fix to try.
type Finding struct {
	Severity string `json:"severity"`
	// Check names the diagnosis: opt-out, node-not-ready, driver-drift, gate, gpu-capacity,
	// runtimeclass, runtimeclass-missing, object-missing, object-changed, kind-not-served, ...
	Check   string `json:"check"`
	Message string `json:"message"`
	Fix     string `json:"fix,omitempty"`
}

// Report is everything doctor found, in a stable order (nodes and pods sorted by name).
type Report struct {
	Expectations Expectations    `json:"expectations"`
	Cluster      []Finding       `json:"cluster,omitempty"`
	Nodes        []NodeReport    `json:"nodes"`
	Pods         []PodReport     `json:"pods"`
	Objects      []ObjectFinding `json:"objects,omitempty"`
	// ObjectsRendered is the number of rendered objects meant for the cluster (-f only);
	// ObjectsChecked those doctor could read back (a forbidden read is a note instead).
	ObjectsRendered int `json:"objectsRendered,omitempty"`
	ObjectsChecked  int `json:"objectsChecked,omitempty"`
	// Notes say what could not be checked (a forbidden read of a non-essential resource).
	Notes []string `json:"notes,omitempty"`
}

// Errors counts the findings of severity error; doctor exits 1 when there is any.
func (r *Report) Errors() int {
	n := countErrors(r.Cluster)
	for _, node := range r.Nodes {
		n += countErrors(node.Findings)
	}
	for _, p := range r.Pods {
		if p.Finding.Severity == SeverityError {
			n++
		}
	}
	for _, o := range r.Objects {
		if o.Severity == SeverityError {
			n++
		}
	}
	return n
}

func countErrors(fs []Finding) int {
	n := 0
	for _, f := range fs {
		if f.Severity == SeverityError {
			n++
		}
	}
	return n
}

// NodeReport is the state of one GPU node's gates, driver, GPUs and runtime.
type NodeReport struct {
	Name string `json:"name"`
	// KubeletReady is the node's Ready condition; Unschedulable a cordon.
	KubeletReady  bool            `json:"kubeletReady"`
	Unschedulable bool            `json:"unschedulable,omitempty"`
	Gates         []Gate          `json:"gates"`
	Driver        DriverState     `json:"driver"`
	GPUs          GPUState        `json:"gpus"`
	RuntimeClass  RuntimeClassFit `json:"runtimeClass"`
	// StackCondition is the agent's GPUStackReady Node condition, when the node has one.
	StackCondition *StackCondition `json:"stackCondition,omitempty"`
	// Verdict is "ready" or the message of the first error finding.
	Verdict  string    `json:"verdict"`
	Findings []Finding `json:"findings,omitempty"`
}

// StackCondition is the GPUStackReady condition as the agent last wrote it: what
// `kubectl describe node` shows.
type StackCondition struct {
	Status  string `json:"status"`
	Reason  string `json:"reason"`
	Message string `json:"message,omitempty"`
}

// Gate states.
const (
	GateStateOpen     = "open"
	GateStateClosed   = "closed"
	GateStateOptedOut = "opted-out"
	GateStateDisabled = "disabled"
)

// Gate is one stage label on a node and the agent's recorded verdict for it.
type Gate struct {
	Stage string `json:"stage"`
	Label string `json:"label"`
	State string `json:"state"`
	// Reason is the agent's recorded reason (annotation nvidia.com/gpu.gate-status) for a
	// gate that is not open, prefixed with the stage whose check failed.
	Reason string `json:"reason,omitempty"`
	// blockedBy is the check that keeps a closed gate closed ("" for the entry gate): doctor's
	// fix is that check's (config.Gates).
	blockedBy string
}

// DriverState compares the driver the agent found with the policy's.
type DriverState struct {
	Version  string `json:"version,omitempty"`
	Expected string `json:"expected,omitempty"`
	Enforce  string `json:"enforce,omitempty"`
	Drift    bool   `json:"drift"`
	// Detail is the agent's drift annotation (expected vs found), when it wrote one.
	Detail string `json:"detail,omitempty"`
	// KernelModules is the flavour of the loaded module (open | proprietary, from the agent's
	// label); WantModules the one the policy asks for ("" for either).
	KernelModules string `json:"kernelModules,omitempty"`
	WantModules   string `json:"wantModules,omitempty"`
}

// ModulesDrift says the loaded kernel module is the other flavour than the policy asks for.
func (d DriverState) ModulesDrift() bool {
	return d.KernelModules != "" && d.WantModules != "" && d.WantModules != config.KernelModulesAuto && d.KernelModules != d.WantModules
}

// GPUState compares the GPUs the agent found with what the kubelet advertises.
type GPUState struct {
	// Resource is the name the device plugin advertises on this node (its pool's).
	Resource string `json:"resource"`
	// Found is the nvidia.com/gpu.count label; -1 when the node has none.
	Found       int   `json:"found"`
	Replicas    int   `json:"replicas"`
	Capacity    int64 `json:"capacity"`
	Allocatable int64 `json:"allocatable"`
	// MIGCapacity and MIGAllocatable sum the nvidia.com/mig-* resources a device plugin with
	// migStrategy mixed advertises instead of whole GPUs.
	MIGCapacity    int64 `json:"migCapacity,omitempty"`
	MIGAllocatable int64 `json:"migAllocatable,omitempty"`
	// InUse is the sum of the requests of the node's running and pending pods.
	InUse int64 `json:"inUse"`
}

// RuntimeClassFit says whether the RuntimeClass's scheduling.nodeSelector selects the node.
type RuntimeClassFit struct {
	Name     string `json:"name"`
	Selector string `json:"selector,omitempty"`
	// Known is false when the RuntimeClass could not be read or does not exist.
	Known   bool `json:"known"`
	Matches bool `json:"matches"`
}

// Pod gates, in the order a GPU pod passes them; FailedGate is the first one it fails.
const (
	PodGateNone                 = "none"
	PodGateRuntimeClassMissing  = "runtimeclass-missing"
	PodGateGPUResource          = "gpu-resource"
	PodGateRuntimeClassSelector = "runtimeclass-selector"
	PodGateNodeSelector         = "node-selector"
	PodGateTolerations          = "tolerations"
	PodGateNodeUnavailable      = "node-unavailable"
	PodGateScheduler            = "scheduler"
	PodGateRuntimeHandler       = "runtime-handler"
	PodGateDeviceAdmission      = "device-admission"
	PodGateContainer            = "container"
)

// PodReport is the diagnosis of one GPU pod.
type PodReport struct {
	Namespace        string  `json:"namespace"`
	Name             string  `json:"name"`
	Phase            string  `json:"phase"`
	Node             string  `json:"node,omitempty"`
	Resource         string  `json:"resource"`
	GPUs             int64   `json:"gpus"`
	RuntimeClassName string  `json:"runtimeClassName,omitempty"`
	FailedGate       string  `json:"failedGate"`
	Finding          Finding `json:"finding"`
	// Evidence is what the diagnosis rests on: the pod's last warning events.
	Evidence []string `json:"evidence,omitempty"`
}

// ObjectFinding is a rendered object that is missing or changed in the cluster.
type ObjectFinding struct {
	Finding
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name"`
	// Changes lists the first differing fields as "path: want X, have Y".
	Changes []string `json:"changes,omitempty"`
}
