package config

import "strings"

// Node label keys. The stage keys are GPU Operator's, so runbooks and node selectors carry over.
const (
	// LabelGPUPresent is the default entry gate (spec.nodeSelector); set by a person or NFD.
	LabelGPUPresent = "nvidia.com/gpu.present"

	// LabelDeployPrefix begins every stage gate key.
	LabelDeployPrefix           = "nvidia.com/gpu.deploy."
	LabelDeployDriver           = LabelDeployPrefix + "driver"
	LabelDeployToolkit          = "nvidia.com/gpu.deploy.container-toolkit"
	LabelDeployDevicePlugin     = "nvidia.com/gpu.deploy.device-plugin"
	LabelDeployFeatureDiscovery = "nvidia.com/gpu.deploy.gpu-feature-discovery"
	LabelDeployExporter         = "nvidia.com/gpu.deploy.dcgm-exporter"

	// LabelToolkitReady is opened with the toolkit stage's downstream gates; the RuntimeClass
	// selects on it so a pod with runtimeClassName lands only where containerd has the handler.
	// It is separate from the device-plugin gate so opting a node out of the device plugin
	// does not also hide the runtime.
	LabelToolkitReady = "nvidia.com/gpu.toolkit.ready"

	// LabelGPUCount and LabelGPUReplicas are written by the feature-discovery stage under
	// gpu-feature-discovery's names (the GPUs found, the time-slicing replicas of each); doctor
	// checks the kubelet's capacity against them.
	LabelGPUCount    = "nvidia.com/gpu.count"
	LabelGPUReplicas = "nvidia.com/gpu.replicas"

	LabelDriverVersion = "nvidia.com/gpu.driver.version"
	// LabelDriverDrift is "true" while the node's driver does not satisfy driver.version
	// under the policy's enforce rule (annotation AnnotationDriverDrift says expected vs found).
	LabelDriverDrift = "nvidia.com/gpu.driver.drift"
	// LabelDriverKernelModules is the flavour of the loaded kernel module, open or proprietary
	// (KernelModulesOpen, KernelModulesProprietary), as its version line says.
	LabelDriverKernelModules = "nvidia.com/gpu.driver.kernel-module-type"

	// AnnotationGateStatus holds the agent's last verdict per stage as JSON
	// ({"driver":{"ready":true,"reason":"..."},...}); doctor reads it.
	AnnotationGateStatus  = "nvidia.com/gpu.gate-status"
	AnnotationDriverDrift = "nvidia.com/gpu.driver.drift"

	// ManagedPrefix: the only label/annotation prefix the agent may change (guardrails enforce it).
	ManagedPrefix = "nvidia.com/"
)

// Feature labels the feature-discovery stage (gpu-node-agent labels) writes, under
// gpu-feature-discovery's names, besides LabelGPUCount and LabelGPUReplicas.
const (
	LabelGPUProduct         = "nvidia.com/gpu.product"
	LabelGPUMemory          = "nvidia.com/gpu.memory" // MiB
	LabelGPUFamily          = "nvidia.com/gpu.family"
	LabelGPUComputeMajor    = "nvidia.com/gpu.compute.major"
	LabelGPUComputeMinor    = "nvidia.com/gpu.compute.minor"
	LabelCUDADriverFull     = "nvidia.com/cuda.driver-version.full"
	LabelCUDADriverMajor    = "nvidia.com/cuda.driver-version.major"
	LabelCUDADriverMinor    = "nvidia.com/cuda.driver-version.minor"
	LabelCUDADriverRev      = "nvidia.com/cuda.driver-version.revision"
	LabelCUDARuntimeFull    = "nvidia.com/cuda.runtime-version.full"
	LabelCUDARuntimeMajor   = "nvidia.com/cuda.runtime-version.major"
	LabelCUDARuntimeMinor   = "nvidia.com/cuda.runtime-version.minor"
	LabelLegacyDriverMajor  = "nvidia.com/cuda.driver.major"
	LabelLegacyDriverMinor  = "nvidia.com/cuda.driver.minor"
	LabelLegacyDriverRev    = "nvidia.com/cuda.driver.rev"
	LabelLegacyRuntimeMajor = "nvidia.com/cuda.runtime.major"
	LabelLegacyRuntimeMinor = "nvidia.com/cuda.runtime.minor"
	LabelMIGCapable         = "nvidia.com/mig.capable"
	LabelMIGStrategy        = "nvidia.com/mig.strategy"
	// LabelMIGConfig is a person's choice of a declared MIG layout for one node (GPU
	// Operator's key); the agent only reads it. LabelMIGConfigState is the agent's report of
	// applying it: pending, rebooting, success or failed, GPU Operator's values.
	LabelMIGConfig          = "nvidia.com/mig.config"
	LabelMIGConfigState     = "nvidia.com/mig.config.state"
	LabelGPUSharingStrategy = "nvidia.com/gpu.sharing-strategy"
	LabelMIGProfilePrefix   = "nvidia.com/mig-"        // mixed: nvidia.com/mig-<profile>.<shape suffix>
	LabelGPUShapePrefix     = "nvidia.com/gpu"         // single: nvidia.com/gpu<shape suffix>
	LabelGPUMachine         = "nvidia.com/gpu.machine" // the node's DMI product name
	LabelGPUMode            = "nvidia.com/gpu.mode"    // compute | graphics | unknown (PCI class)
	LabelMPSCapable         = "nvidia.com/mps.capable"
	LabelVGPUPresent        = "nvidia.com/vgpu.present"
	LabelVGPUHostDriverVer  = "nvidia.com/vgpu.host-driver-version"
	LabelVGPUHostDriverBr   = "nvidia.com/vgpu.host-driver-branch"
)

// FeatureLabelShapeSuffixes are the per-MIG-profile label suffixes (single: after
// LabelGPUShapePrefix; mixed: after LabelMIGProfilePrefix<profile>).
var FeatureLabelShapeSuffixes = []string{".memory", ".multiprocessors", ".slices.gi", ".slices.ci",
	".engines.copy", ".engines.decoder", ".engines.encoder", ".engines.jpeg", ".engines.ofa"}

var featureLabels = map[string]bool{
	LabelGPUProduct: true, LabelGPUMemory: true, LabelGPUCount: true, LabelGPUFamily: true,
	LabelGPUComputeMajor: true, LabelGPUComputeMinor: true,
	LabelCUDADriverFull: true, LabelCUDADriverMajor: true, LabelCUDADriverMinor: true, LabelCUDADriverRev: true,
	LabelCUDARuntimeFull: true, LabelCUDARuntimeMajor: true, LabelCUDARuntimeMinor: true,
	LabelLegacyDriverMajor: true, LabelLegacyDriverMinor: true, LabelLegacyDriverRev: true,
	LabelLegacyRuntimeMajor: true, LabelLegacyRuntimeMinor: true,
	LabelMIGCapable: true, LabelMIGStrategy: true, LabelGPUReplicas: true, LabelGPUSharingStrategy: true,
	LabelGPUMachine: true, LabelGPUMode: true, LabelMPSCapable: true,
	LabelVGPUPresent: true, LabelVGPUHostDriverVer: true, LabelVGPUHostDriverBr: true,
}

// IsFeatureLabel reports whether the feature-discovery stage writes key (and so may remove
// it when it no longer computes it).
func IsFeatureLabel(key string) bool {
	if featureLabels[key] || strings.HasPrefix(key, LabelMIGProfilePrefix) {
		return true
	}
	for _, s := range FeatureLabelShapeSuffixes {
		if key == LabelGPUShapePrefix+s {
			return true
		}
	}
	return false
}

// Who writes a node label the stack sets itself (SetByStack).
const (
	WriterGate             = "the node agent's stage gates"
	WriterDriver           = "the node agent's driver check"
	WriterFeatureDiscovery = "the feature-discovery stage"
)

// SetByStack reports which of the stack's node programs writes label key, or "" for a label
// it never writes (set by a person, NFD or the cloud). A DaemonSet selecting on such a label
// depends on the stage that writes it.
func SetByStack(key string) string {
	switch {
	case strings.HasPrefix(key, LabelDeployPrefix) || key == LabelToolkitReady:
		return WriterGate
	case key == LabelDriverVersion || key == LabelDriverDrift || key == LabelDriverKernelModules:
		return WriterDriver
	case IsFeatureLabel(key):
		return WriterFeatureDiscovery
	}
	return ""
}

// ProductLabel is the LabelGPUProduct value of an NVML device name ("NVIDIA A100-SXM4-80GB" →
// "NVIDIA-A100-SXM4-80GB"), as gpu-feature-discovery writes it (its sanitise: characters other
// than letters, digits, '-', '_', '.' and blanks are dropped, runs of blanks become one '-'):
// the labels step writes it and the MIG step compares a pool's gpuProduct with it. Unlike
// GFD's, the value is also cut to a valid label value (at most 63 characters, starting and
// ending alphanumeric), so a long or odd name cannot get the whole label update refused.
func ProductLabel(name string) string {
	const maxLabelValueLength = 63
	var b strings.Builder
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.', r == ' ':
			b.WriteRune(r)
		}
	}
	out := strings.Trim(strings.Join(strings.Fields(b.String()), "-"), "-_.")
	if len(out) > maxLabelValueLength {
		out = strings.TrimRight(out[:maxLabelValueLength], "-_.")
	}
	return out
}
