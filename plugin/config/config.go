// Package config is the contract between the function (fn/), which renders these documents
// into ConfigMaps, and the node programs (plugin/), which read them. One Go type per file
// format keeps both sides in step: a field renamed here breaks the build on both sides.
// Every fact both sides must agree on lives here once:
//
//   - config.go: the documents' types, ConfigMap names, mount paths, the CDI kind;
//   - deviceplugin.go: the device plugin's defaults and enumerations, its strict loader;
//   - agent.go: the agent's strict loader and which pool a node is in (Agent.PoolFor);
//   - gates.go: the stage/gate table the agent opens and doctor reads;
//   - labels.go: node label and annotation keys; containerd.go: containerd's config versions.
//
// Every document is YAML (JSON field names) and is decoded strictly.
package config

// File names inside the rendered ConfigMaps and the directories the DaemonSets mount them at.
const (
	AgentConfigMap        = "gpu-node-agent"       // key AgentConfigFile
	AgentConfigFile       = "config.yaml"          //
	AgentConfigDir        = "/etc/gpupolicy/agent" // mount point in the agent containers
	DropInConfigMap       = "gpu-containerd-drop-in"
	DropInFile            = "99-gpupolicy-nvidia.toml" // key in DropInConfigMap and file name in dropInDir
	DropInDir             = "/etc/gpupolicy/containerd"
	DevicePluginConfigMap = "gpu-device-plugin" // "-<pool>" appended for node pools
	DevicePluginFile      = "config.yaml"
	DevicePluginDir       = "/etc/gpupolicy/device-plugin"

	// ToolkitStatusFile is written under --host-root by `gpu-node-agent toolkit install` once
	// containerd is verified to have loaded the handler; the gate reads it (read-only mount)
	// so the unprivileged agent never needs the containerd socket.
	ToolkitStatusFile = "/var/lib/gpupolicy/toolkit-status.json"
	// ToolkitInstallDir is where toolkit.source=container puts NVIDIA's runtime binaries.
	ToolkitInstallDir = "/usr/local/nvidia/toolkit"
	// CDISpecFile is where `gpu-node-agent toolkit install --cdi-spec` installs the node's CDI
	// spec (nvidia.com/gpu devices named by UUID) for deviceListStrategy cdi-cri; its directory
	// is one of containerd's default cdi_spec_dirs.
	CDISpecFile = "/var/run/cdi/nvidia.yaml"
	// CDIKind is the CDI kind (vendor/class) of NVIDIA's generated spec (nvidia-ctk cdi
	// generate): the device plugin hands containerd "<CDIKind>=<uuid>" under cdi-cri, and the
	// agent checks the installed spec declares that kind. Devices are named by UUID, so the
	// same name works for GPUs and MIG devices alike.
	CDIKind = "nvidia.com/gpu"
)

// Agent is the node agent's configuration (ConfigMap AgentConfigMap, key AgentConfigFile).
type Agent struct {
	// Interval between re-validations of every stage by `gate`, a Go duration ("30s").
	Interval         string           `json:"interval"`
	Driver           AgentDriver      `json:"driver"`
	CUDAVersion      string           `json:"cudaVersion"`
	ContainerRuntime ContainerRuntime `json:"containerRuntime"`
	Toolkit          AgentToolkit     `json:"toolkit"`
	// Stages that are enabled in the policy; a disabled stage's label is never opened.
	Stages Stages `json:"stages"`
	// DevicePlugin settings of the nodes outside every pool, and of each pool; the agent
	// finds its node's pool by the pool's nodeSelector (pools are disjoint by validation).
	DevicePlugin DevicePlugin `json:"devicePlugin"`
	NodePools    []AgentPool  `json:"nodePools,omitempty"`
	// Upgrade is how the agents replace a source=container driver (spec.driver.upgrade).
	Upgrade *AgentUpgrade `json:"upgrade,omitempty"`
}

// AgentDriver is what a node's driver must satisfy before its toolkit gate opens.
type AgentDriver struct {
	Source  string `json:"source"`  // preinstalled | container
	Version string `json:"version"` // expected, e.g. 580.95.05
	Enforce string `json:"enforce"` // exact | branch | none
	// Image is the driver image source=container runs (repository:tag), so the agent can tell
	// which version a driver pod brings.
	Image string `json:"image,omitempty"`
	// OnDrift is report | taint (spec.driver.onDrift); "" is report.
	OnDrift string `json:"onDrift,omitempty"`
	// KernelModules is the flavour the loaded kernel module must be: open or proprietary;
	// "" or auto accepts either (spec.driver.kernelModuleType).
	KernelModules string `json:"kernelModules,omitempty"`
}

// The flavours of NVIDIA's kernel modules (the GPU Operator's driver.kernelModuleType).
const (
	KernelModulesAuto        = "auto"
	KernelModulesOpen        = "open"
	KernelModulesProprietary = "proprietary"
)

// ContainerRuntime mirrors spec.containerRuntime of the policy.
type ContainerRuntime struct {
	Name        string `json:"name"`
	Version     string `json:"version"` // containerd minor on the nodes, e.g. "1.7"
	ConfigPath  string `json:"configPath"`
	DropInDir   string `json:"dropInDir"`
	Socket      string `json:"socket"`
	RestartMode string `json:"restartMode"` // systemd | signal | none
}

// AgentToolkit is what the toolkit stage installs and the gate verifies.
type AgentToolkit struct {
	Source           string `json:"source"` // container | preinstalled
	Version          string `json:"version"`
	RuntimeClassName string `json:"runtimeClassName"` // also the containerd runtime handler name
	RuntimePath      string `json:"runtimePath"`      // nvidia-container-runtime on the host
	CDI              bool   `json:"cdi"`
	// DropInSHA256 is the sha256 (hex) of the rendered drop-in; the gate compares it with the
	// status file so a node running an older drop-in does not pass.
	DropInSHA256 string `json:"dropInSHA256"`
}

// Stages says which optional stages the policy enables.
type Stages struct {
	FeatureDiscovery bool `json:"featureDiscovery"`
	Exporter         bool `json:"exporter"`
	// MIG is set when some node pool declares MIG layouts: the gate then runs the
	// mig-manager check between the toolkit and the device-plugin gates.
	MIG bool `json:"mig,omitempty"`
	// MPS is set when spec.devicePlugin or some node pool shares GPUs with MPS: the gate then
	// runs the mps-control-daemon check between the MIG step and the device-plugin gate.
	MPS bool `json:"mps,omitempty"`
}

// AgentPool is a node pool as the agent needs it: to pick its node's device plugin settings
// (for the gpu.replicas / sharing-strategy / mig.strategy labels).
type AgentPool struct {
	Name         string            `json:"name"`
	NodeSelector map[string]string `json:"nodeSelector"`
	DevicePlugin DevicePlugin      `json:"devicePlugin"`
	MIG          *AgentMIG         `json:"mig,omitempty"`
	// Driver is the pool's own driver (spec.nodePools[].driver over spec.driver), run by
	// DaemonSet gpu-driver-<pool>; nil: the pool runs the default driver stage.
	Driver *AgentDriver `json:"driver,omitempty"`
}

// DevicePlugin is the device plugin's configuration (ConfigMap DevicePluginConfigMap[-pool],
// key DevicePluginFile), fully defaulted by the function.
type DevicePlugin struct {
	Pool string `json:"pool,omitempty"` // "" for the nodes outside every pool
	// Allocation is "dra" where the DRA plugin (gpu-device-plugin dra) serves the nodes instead
	// of the device plugin; "" is the device plugin. The agent and doctor read it.
	Allocation         string       `json:"allocation,omitempty"`
	ResourceName       string       `json:"resourceName"`
	MIGStrategy        string       `json:"migStrategy"`        // none | single | mixed
	DeviceListStrategy string       `json:"deviceListStrategy"` // cdi-cri | envvar
	Sharing            Sharing      `json:"sharing"`
	HealthChecks       HealthChecks `json:"healthChecks"`
}

// Sharing of one GPU between containers.
type Sharing struct {
	TimeSlicing TimeSlicing `json:"timeSlicing"`
	// MPS shares each GPU between Replicas clients through NVIDIA's MPS control daemon
	// (k8s-device-plugin's sharing.mps); it excludes TimeSlicing. nil: no MPS. The feature
	// labels describe it as gpu-feature-discovery does.
	MPS *MPS `json:"mps,omitempty"`
}

// MPS is the MPS sharing of a GPU: Replicas clients each (2 to MaxMPSClients).
type MPS struct {
	Replicas int `json:"replicas"`
}

// Sharing strategies, under gpu-feature-discovery's names (label nvidia.com/gpu.sharing-strategy).
const (
	SharingNone        = "none"
	SharingTimeSlicing = "time-slicing"
	SharingMPS         = "mps"
)

// Strategy is the sharing strategy in force and each GPU's replicas (1 when none).
func (s Sharing) Strategy() (string, int) {
	switch {
	case s.MPS != nil && s.MPS.Replicas > 1:
		return SharingMPS, s.MPS.Replicas
	case s.TimeSlicing.Replicas > 1:
		return SharingTimeSlicing, s.TimeSlicing.Replicas
	}
	return SharingNone, 1
}

// TimeSlicing advertises each GPU Replicas times (ids "<uuid>::<n>"); 1 means no sharing.
type TimeSlicing struct {
	Replicas int `json:"replicas"`
}

// HealthChecks configures XID-based device health.
type HealthChecks struct {
	Enabled     bool     `json:"enabled"`
	IgnoredXIDs []uint64 `json:"ignoredXIDs"`
	// RecoveryPeriod: a device that was marked Unhealthy is Healthy again after NVML reports
	// it sane for this long (Go duration). Empty means the plugin's default.
	RecoveryPeriod string `json:"recoveryPeriod,omitempty"`
}
