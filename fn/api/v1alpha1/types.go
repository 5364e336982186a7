// Package v1alpha1 is the GPUPolicy API: the compact, committed description of a GPU fleet that
// the function expands into rendered manifests. Field names are a contract (tests outside this
// repository use them); add fields, never rename. Defaults live in defaults.go only, strict
// decoding with field paths in decode.go. The reference document is fn/api/v1alpha1/README.md.
package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

const (
	Group      = "gpupolicy.dev"
	Version    = "v1alpha1"
	APIVersion = Group + "/" + Version
	Kind       = "GPUPolicy"
)

// GPUPolicy is the one object a platform team writes for its GPU fleet.
type GPUPolicy struct {
	APIVersion string     `json:"apiVersion"`
	Kind       string     `json:"kind"`
	Metadata   ObjectMeta `json:"metadata"`
	Spec       Spec       `json:"spec"`
}

// ObjectMeta is the part of Kubernetes object metadata a GPUPolicy may carry. The policy is
// never applied to a cluster, so server-set fields have no meaning here.
type ObjectMeta struct {
	// Name of the policy; results and rendered objects refer to it. At most 63 characters (the
	// app.kubernetes.io/instance label value of every object), 45 with gitops: flux
	// (<name>-container-toolkit names a Flux Kustomization, whose name Flux also writes as a label
	// value).
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Spec is the desired state of every GPU node of one cluster.
type Spec struct {
	// Namespace receives every namespaced object. Default gpu-system. It must be the GPU
	// stack's own: not default or kube-*, and not a GitOps controller's (flux-system, argocd,
	// openshift-gitops, cattle-fleet-system), because the rendered Namespace is pruned with the
	// stack.
	Namespace string `json:"namespace,omitempty"`
	// KubernetesVersion is the minor of the target cluster ("1.34"). Required.
	KubernetesVersion string `json:"kubernetesVersion,omitempty"`
	// GitOps selects the ordering metadata: argocd | flux | none. Default argocd.
	GitOps string `json:"gitops,omitempty"`
	// Discovery says who sets nvidia.com/gpu.present=true on GPU nodes: builtin (a small
	// unprivileged DaemonSet on every Linux node reads the PCI bus and sets only that label on
	// its own node, never over a person's "false"), nfd (a NodeFeatureRule for a cluster that
	// runs Node Feature Discovery) or none (a person or another tool labels the nodes).
	// Default builtin.
	Discovery string `json:"discovery,omitempty"`
	// Allocation is how GPUs reach pods: devicePlugin (the kubelet device plugin advertises the
	// extended resource devicePlugin.resourceName) or dra (Dynamic Resource Allocation: a DRA
	// kubelet plugin publishes ResourceSlices of driver gpu.nvidia.com and pods ask through
	// ResourceClaims of the DeviceClasses gpu.nvidia.com and mig.nvidia.com; needs Kubernetes
	// ≥ 1.34). A node pool may override it. Default devicePlugin.
	Allocation string `json:"allocation,omitempty"`
	// Registry replaces the registry host of every image (air-gapped mirrors). Default none.
	Registry string `json:"registry,omitempty"`
	// ImagePullSecrets are secret names added to every pod.
	ImagePullSecrets []string `json:"imagePullSecrets,omitempty"`
	// NodeSelector is the entry gate: which nodes are GPU nodes.
	// Default {nvidia.com/gpu.present: "true"}. It must not name a label the stack writes
	// itself (the gates nvidia.com/gpu.deploy.*, nvidia.com/gpu.driver.version, the feature
	// labels nvidia.com/gpu.product, gpu.count, gpu.memory, mig.*, cuda.*, ...): the node
	// agent's DaemonSet requires it, so nothing would ever set that label on a new node.
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// Tolerations are added to every DaemonSet. Default: tolerate nvidia.com/gpu:NoSchedule.
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
	// PriorityClassName of every DaemonSet pod. Default system-node-critical.
	PriorityClassName string           `json:"priorityClassName,omitempty"`
	ContainerRuntime  ContainerRuntime `json:"containerRuntime"`
	Driver            Driver           `json:"driver"`
	CUDA              CUDA             `json:"cuda"`
	Toolkit           Toolkit          `json:"toolkit"`
	DevicePlugin      DevicePlugin     `json:"devicePlugin"`
	FeatureDiscovery  FeatureDiscovery `json:"featureDiscovery"`
	Exporter          Exporter         `json:"exporter"`
	// NodePools are disjoint subsets of the GPU nodes with their own device plugin settings.
	NodePools  []NodePool `json:"nodePools,omitempty"`
	Guardrails Guardrails `json:"guardrails"`
	Images     Images     `json:"images"`
}

// ContainerRuntime describes the nodes' container runtime; only containerd in v1alpha1.
type ContainerRuntime struct {
	// Container runtime of the nodes. Only containerd in v1alpha1.
	Name string `json:"name,omitempty"`
	// Version is the containerd minor on the nodes ("1.7", "2.1"): it decides the config
	// version (2 below 2.0, 3 from 2.0) and whether the drop-in must carry the node's CRI
	// settings (imports replace whole plugin tables before 2.1).
	Version string `json:"version,omitempty"`
	// Path of containerd's main config file on the node; the toolkit stage reads it to carry the
	// node's own CRI settings into the drop-in where containerd would otherwise drop them.
	ConfigPath string `json:"configPath,omitempty"`
	// Directory containerd imports drop-in files from; the toolkit stage writes
	// 99-gpupolicy-nvidia.toml there. Neither configPath nor a directory above or below it.
	DropInDir string `json:"dropInDir,omitempty"`
	// containerd's socket on the node; the toolkit stage uses it to verify containerd loaded the
	// runtime handler.
	Socket string `json:"socket,omitempty"`
	// How the toolkit stage makes containerd load a changed drop-in: systemd (restart the unit),
	// signal (signal containerd so its supervisor restarts it), none (a person restarts containerd;
	// the gate stays closed until the handler is loaded). containerd is restarted only when the
	// drop-in's bytes changed.
	RestartMode string `json:"restartMode,omitempty"`
}

// Driver is the NVIDIA kernel driver the nodes must run.
type Driver struct {
	// preinstalled: the host image has the driver and the driver stage only validates it
	// (unprivileged). container: NVIDIA's driver container (image:<version>-<os>) builds and loads it
	// (privileged).
	Source string `json:"source,omitempty"`
	// Expected driver version MAJOR.MINOR[.PATCH] as nvidia-smi prints it, e.g. "580.95.05" (quote
	// it). The patch is required from R450 on ("580.95" is refused; only older branches, like 390.144,
	// have none) and has two digits: "580.95.5" is refused with the spelling to write, the node
	// agent's rule (plugin/config). A node with another version is drift, see enforce.
	Version string `json:"version,omitempty"`
	// What a node's driver must match before its toolkit gate opens: exact (the full version), branch
	// (the same branch, e.g. 580), none (any driver; drift is only labelled).
	Enforce string `json:"enforce,omitempty"`
	// Repository of NVIDIA's driver image for source=container; the tag is <version>-<os>.
	Image string `json:"image,omitempty"`
	// OS is the tag suffix of NVIDIA's driver image for source=container ("ubuntu24.04").
	OS string `json:"os,omitempty"`
	// OnDrift is what a node whose preinstalled driver differs from version gets: report (the
	// drift labels, annotation and Event only) or taint (also nvidia.com/gpu.driver-drift:NoSchedule,
	// for Karpenter or Cluster API to replace the node; removed when the driver matches again).
	// Default report.
	OnDrift string `json:"onDrift,omitempty"`
	// KernelModuleType is the flavour of NVIDIA's kernel modules, as the GPU Operator's
	// driver.kernelModuleType: open (NVIDIA's open GPU kernel modules, required from Blackwell
	// and on Grace Hopper, supported from Turing), proprietary (the closed modules, which
	// Blackwell cannot run), or auto (the driver container picks what the GPUs and branch
	// recommend; the agents accept either). The driver container gets it as KERNEL_MODULE_TYPE;
	// a preinstalled driver of the other flavour is drift (see onDrift). Default auto.
	KernelModuleType string `json:"kernelModuleType,omitempty"`
	// Upgrade is how the node agents replace a source=container driver: each agent takes a
	// slot (a Lease) of its pool, cordons its own node, waits for jobs, evicts GPU pods,
	// deletes its driver pod, validates and uncordons. GPU Operator's upgrade policy, with its
	// defaults, except that no central controller runs it.
	Upgrade *DriverUpgrade `json:"upgrade,omitempty"`
}

// DriverUpgrade bounds and orders a rolling driver upgrade.
type DriverUpgrade struct {
	// MaxUnavailable is how many GPU nodes of one pool (or of the nodes outside every pool)
	// may upgrade at once: a number, or a percentage of the pool's GPU nodes, rounded up.
	// Default "25%".
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
	Drain          *DriverDrain        `json:"drain,omitempty"`
	WaitForJobs    *WaitForJobs        `json:"waitForJobs,omitempty"`
}

// DriverDrain evicts pods from a node before its driver pod is replaced.
type DriverDrain struct {
	// Enabled evicts, through the Eviction API (PodDisruptionBudgets respected), the pods on
	// the node that use a GPU, and those podSelector selects. Default true: replacing the
	// driver under a running GPU job kills it.
	Enabled *bool `json:"enabled,omitempty"`
	// Timeout of the evictions (Go duration): a node that still holds such pods after it is
	// marked upgrade-failed (and stays cordoned). "0s" waits for ever. Default 10m.
	Timeout string `json:"timeout,omitempty"`
	// PodSelector is a label selector of more pods to evict besides the GPU pods. Default "".
	PodSelector string `json:"podSelector,omitempty"`
}

// WaitForJobs waits for selected pods on a node to finish before anything is evicted.
type WaitForJobs struct {
	// PodSelector is a label selector of the pods to wait for; "" waits for none. Default "".
	PodSelector string `json:"podSelector,omitempty"`
	// Timeout of the wait (Go duration), after which the upgrade goes on; "0s" waits for ever.
	// Default 0s.
	Timeout string `json:"timeout,omitempty"`
}

// NodePoolDriver overrides spec.driver for one node pool: the pool gets its own driver-stage
// DaemonSet (gpu-driver-<pool>) and is left out of the default one. Unset fields inherit
// spec.driver.
type NodePoolDriver struct {
	// Version is the pool's driver ("570.195.03"); it must support cuda.version.
	Version string `json:"version,omitempty"`
	// Source is preinstalled (validate only) or container (NVIDIA's driver image).
	Source string `json:"source,omitempty"`
	// Image is the repository of the driver image for source=container; the tag is
	// <version>-<spec.driver.os>.
	Image string `json:"image,omitempty"`
	// Enforce is exact | branch | none: what the pool's nodes must match before their gates open.
	Enforce string `json:"enforce,omitempty"`
	// KernelModuleType is auto | open | proprietary for the pool's driver (spec.driver's
	// otherwise): the pool's GPU models decide what they can load.
	KernelModuleType string `json:"kernelModuleType,omitempty"`
}

// CUDA is the CUDA version of the workloads; driver.version must support it.
type CUDA struct {
	// CUDA version of the workloads, e.g. "12.8" (quote it); driver.version must be at least the
	// minimum driver of this CUDA major.
	Version string `json:"version,omitempty"`
}

// Toolkit is nvidia-container-toolkit and the runtime handler it gives containerd.
type Toolkit struct {
	// container: an init container copies nvidia-container-toolkit from toolkit.image to
	// /usr/local/nvidia/toolkit on the node. preinstalled: the host image already has it.
	Source string `json:"source,omitempty"`
	// nvidia-container-toolkit version; the image tag for source=container.
	Version string `json:"version,omitempty"`
	// Repository of NVIDIA's container-toolkit image (source=container).
	Image string `json:"image,omitempty"`
	// RuntimeClassName names the RuntimeClass and the containerd runtime handler. It must not
	// be a runtime the nodes already have (runc, crun, youki, runsc, gvisor, kata, kata-*, ...):
	// the drop-in would route that runtime's pods through nvidia-container-runtime.
	RuntimeClassName string `json:"runtimeClassName,omitempty"`
	// SetAsDefault makes the nvidia runtime containerd's default runtime.
	SetAsDefault *bool `json:"setAsDefault,omitempty"`
	// CDI makes the runtime inject devices through CDI specs.
	CDI *bool `json:"cdi,omitempty"`
	// Resources of the toolkit stage's containers (toolkit-copy and install). Default: requests
	// cpu 20m, memory 64Mi; limits memory 256Mi. A value set replaces the default whole.
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`
	// UpdateStrategy is how the toolkit DaemonSet replaces its pods when they change.
	UpdateStrategy *UpdateStrategy `json:"updateStrategy,omitempty"`
}

// UpdateStrategy is how a component's DaemonSet replaces its pods after a change of the pod
// template or of a ConfigMap they read (a rolling update).
type UpdateStrategy struct {
	// MaxUnavailable is how many of the DaemonSet's nodes may be without a ready pod during
	// the update: a number, or a percentage of the nodes it selects ("10%"). Default "10%".
	MaxUnavailable *intstr.IntOrString `json:"maxUnavailable,omitempty"`
}

// DevicePlugin configures the kubelet device plugin. In a node pool every field is optional
// and falls back to spec.devicePlugin.
type DevicePlugin struct {
	// Extended resource the device plugin advertises; pods request it in resources.limits.
	ResourceName string `json:"resourceName,omitempty"`
	// How MIG devices are advertised: none (whole GPUs), single (every GPU of a node has the same MIG
	// layout; slices advertised as resourceName), mixed (one resource per MIG profile,
	// nvidia.com/mig-<profile>).
	MIGStrategy string `json:"migStrategy,omitempty"`
	// How allocated devices reach the container: cdi-cri (CDI device names in the CRI response; needs
	// toolkit.cdi) or envvar (NVIDIA_VISIBLE_DEVICES).
	DeviceListStrategy string        `json:"deviceListStrategy,omitempty"`
	Sharing            *Sharing      `json:"sharing,omitempty"`
	HealthChecks       *HealthChecks `json:"healthChecks,omitempty"`
	// Resources of the device plugin container. Default: requests cpu 20m, memory 64Mi; limits
	// memory 256Mi. A value set replaces the default whole.
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`
	// UpdateStrategy is how the device plugin DaemonSet replaces its pods when they change.
	UpdateStrategy *UpdateStrategy `json:"updateStrategy,omitempty"`
}

// Sharing of a GPU between containers: time-slicing or MPS, one of them. A node pool that sets
// either takes neither from spec.devicePlugin.sharing.
type Sharing struct {
	TimeSlicing *TimeSlicing `json:"timeSlicing,omitempty"`
	MPS         *MPS         `json:"mps,omitempty"`
}

// MPS shares every GPU between Replicas clients through NVIDIA's MPS control daemon, which runs
// as a stage of its own (DaemonSet gpu-mps-control-daemon[-<pool>]) before the device plugin, as
// k8s-device-plugin v0.17.4's sharing.mps does: each replica is one client with 100/replicas %
// of the GPU's threads and 1/replicas of its memory (pinned device memory limit), and a container
// may request one replica. Needs migStrategy none, no MIG layouts in the pool and the device
// plugin (not allocation dra, where a claim's GpuConfig chooses MPS).
type MPS struct {
	// How many clients share each GPU: 2 to 48 (the MPS server of Volta and newer GPUs accepts 48
	// clients per GPU).
	Replicas *int `json:"replicas,omitempty"`
}

// TimeSlicing advertises every GPU Replicas times.
type TimeSlicing struct {
	// How many times each GPU is advertised; 1 means no sharing. Containers sharing a GPU get no
	// memory or fault isolation from each other. At most 256: the device plugin lists every replica in
	// one ListAndWatch message, which must stay within gRPC's 4 MiB for a node of 16 GPUs with 7 MIG
	// devices each. An explicit 0 is an error, not the default.
	Replicas *int `json:"replicas,omitempty"`
}

// HealthChecks turns NVML XID events into device health.
type HealthChecks struct {
	// Mark a device Unhealthy when NVML reports a critical XID for it, and Healthy again after it
	// recovers.
	Enabled *bool `json:"enabled,omitempty"`
	// XIDs caused by applications, not by the GPU; they never mark a device Unhealthy.
	IgnoredXIDs []uint64 `json:"ignoredXIDs,omitempty"`
}

// FeatureDiscovery labels nodes with GPU features (gpu-feature-discovery's label names).
type FeatureDiscovery struct {
	// Run the gpu-feature-discovery stage: the node labels gpu-feature-discovery v0.17.4 writes, same
	// names and values (nvidia.com/gpu.product, gpu.memory, gpu.count, gpu.family, gpu.machine,
	// gpu.mode, gpu.replicas, gpu.sharing-strategy, mig.*, mps.capable, vgpu.present, cuda.*; not its
	// timestamp), checked against its own labelers.
	Enabled *bool `json:"enabled,omitempty"`
	// Resources of the feature discovery container. Default: requests cpu 10m, memory 32Mi;
	// limits memory 128Mi. A value set replaces the default whole.
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`
	// UpdateStrategy is how the feature discovery DaemonSet replaces its pods when they change.
	UpdateStrategy *UpdateStrategy `json:"updateStrategy,omitempty"`
}

// Exporter is the dcgm-exporter compatible metrics DaemonSet.
type Exporter struct {
	// Run the metrics exporter stage (dcgm-exporter's metric and label names).
	Enabled *bool `json:"enabled,omitempty"`
	// The port the exporter listens on and its Service exposes; 1024–65535, because the exporter runs
	// without NET_BIND_SERVICE.
	Port *int `json:"port,omitempty"`
	// How often the exporter reads NVML and Prometheus scrapes it (the ServiceMonitor's interval), a
	// Go duration ("15s"): from 1s to 2m30s, half of Prometheus' 5-minute lookback, so GPU series
	// never go stale between scrapes and the alerts' 10-minute windows hold several samples.
	Interval string `json:"interval,omitempty"`
	// Also render a Prometheus Operator ServiceMonitor for the exporter's Service.
	ServiceMonitor *bool `json:"serviceMonitor,omitempty"`
	// ServiceMonitorLabels are added to the ServiceMonitor's labels, for a Prometheus that
	// selects ServiceMonitors by label (kube-prometheus-stack: {release: <its release name>}).
	ServiceMonitorLabels map[string]string `json:"serviceMonitorLabels,omitempty"`
	// PrometheusRule renders the PrometheusRule with the GPU alerts (GPULost, GPUXidError, ...).
	// Default: the value of serviceMonitor.
	PrometheusRule *bool `json:"prometheusRule,omitempty"`
	// PrometheusRuleLabels are added to the PrometheusRule's labels, for a Prometheus that
	// selects rules by label (kube-prometheus-stack: {release: <its release name>}).
	PrometheusRuleLabels map[string]string `json:"prometheusRuleLabels,omitempty"`
	// Label GPU metrics with pod, namespace and container from the kubelet pod-resources API.
	PodAttribution *bool `json:"podAttribution,omitempty"`
	// Resources of the exporter container. Default: requests cpu 50m, memory 64Mi; limits
	// memory 128Mi. A value set replaces the default whole.
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`
	// UpdateStrategy is how the exporter DaemonSet replaces its pods when they change.
	UpdateStrategy *UpdateStrategy `json:"updateStrategy,omitempty"`
}

// NodePool is a disjoint subset of GPU nodes with its own device plugin settings.
type NodePool struct {
	// Pool name (a DNS-1123 label); names the pool's device plugin DaemonSet and ConfigMap
	// (gpu-device-plugin-<name>, a label value too), so at most 45 characters.
	Name string `json:"name"`
	// Labels that select the pool's nodes among the GPU nodes. Pools must be disjoint; the device
	// plugin DaemonSet for the remaining GPU nodes excludes every pool. Not the stage gates
	// (nvidia.com/gpu.deploy.*, gpu.toolkit.ready); a feature label (nvidia.com/gpu.product, ...)
	// draws a warning, because the node joins the pool only once feature discovery labelled it.
	NodeSelector map[string]string `json:"nodeSelector"`
	// Device plugin settings of the pool; every unset field falls back to spec.devicePlugin.
	DevicePlugin *DevicePlugin `json:"devicePlugin,omitempty"`
	// Allocation overrides spec.allocation for the pool's nodes: devicePlugin | dra. Each node
	// runs exactly one of the two plugins, never both. Default: spec.allocation.
	Allocation string `json:"allocation,omitempty"`
	// MIG declares the pool's MIG layouts; the node agent applies one on each of its nodes.
	MIG *MIG `json:"mig,omitempty"`
	// Driver overrides spec.driver's version, source, image, enforce or kernelModuleType for this pool.
	Driver *NodePoolDriver `json:"driver,omitempty"`
}

// MIG is a node pool's MIG layouts in git: named layouts, the pool's own, and the model they
// are checked against. A node may pick another declared layout with the label
// nvidia.com/mig.config; the agent reports nvidia.com/mig.config.state. The layouts are
// rendered as mig-parted's config file (ConfigMap gpu-mig-config, key <pool>.yaml).
type MIG struct {
	// GPUProduct is the pool's GPU model by its product label (nvidia.com/gpu.product, e.g.
	// NVIDIA-A100-SXM4-80GB). When set, every profile and count is checked against the
	// model's supported profiles and placements, and the node agent changes no GPU of another
	// model (the layout fails, naming both); unset, only the names and the slices of one GPU
	// are checked.
	GPUProduct string `json:"gpuProduct,omitempty"`
	// Layout is the layout the pool's nodes get unless their label nvidia.com/mig.config names
	// another declared one. Default: the only layout, when exactly one is declared.
	Layout string `json:"layout,omitempty"`
	// Layouts are the named layouts (mig-parted's mig-configs), each a list of GPU groups.
	Layouts map[string][]MIGDeviceGroup `json:"layouts,omitempty"`
}

// MIGDeviceGroup is one entry of a layout: which GPUs of the node, MIG mode, and the MIG
// devices each of those GPUs gets.
type MIGDeviceGroup struct {
	// Devices is "all" or a list of GPU indexes (nvidia-smi's); entries of one layout must not
	// share a GPU.
	Devices MIGDevices `json:"devices"`
	// MIGEnabled switches MIG mode on the GPUs. Default true; false needs no profiles.
	MIGEnabled *bool `json:"migEnabled,omitempty"`
	// Profiles are the MIG devices of each GPU: profile name ("1g.10gb") → count.
	Profiles map[string]int `json:"profiles,omitempty"`
}

// MIGDevices is "all" or a list of GPU indexes.
type MIGDevices struct {
	All     bool
	Indexes []int
}

// Guardrails are ValidatingAdmissionPolicies that confine the node agent to the nvidia.com/
// labels of its own node.
type Guardrails struct {
	// Render the ValidatingAdmissionPolicy and binding that let the node agent change only nvidia.com/
	// labels and annotations and its GPUStackReady condition, and only of its own node.
	Enabled *bool `json:"enabled,omitempty"`
}

// Images overrides this project's image (default: the function's own version).
type Images struct {
	// This project's image (all node programs). Default: ghcr.io/gpupolicy/gpupolicy at the function's
	// own version, so a rendered tree pins the programs tested with the function that rendered it.
	GPUPolicy string `json:"gpupolicy,omitempty"`
}
