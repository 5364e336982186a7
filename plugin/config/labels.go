package config

// Node label keys. The stage keys are GPU Operator's, so runbooks and node selectors carry over.
const (
	// LabelGPUPresent is the default entry gate (spec.nodeSelector); set by a person or NFD.
	LabelGPUPresent = "nvidia.com/gpu.present"

	LabelDeployDriver           = "nvidia.com/gpu.deploy.driver"
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

	// AnnotationGateStatus holds the agent's last verdict per stage as JSON
	// ({"driver":{"ready":true,"reason":"..."},...}); doctor reads it.
	AnnotationGateStatus  = "nvidia.com/gpu.gate-status"
	AnnotationDriverDrift = "nvidia.com/gpu.driver.drift"

	// ManagedPrefix: the only label/annotation prefix the agent may change (guardrails enforce it).
	ManagedPrefix = "nvidia.com/"
)
