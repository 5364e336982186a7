package importer

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// Unmapped is a set field of the input that has no equivalent in the GPUPolicy: its path,
// its value(s) and why. Inert fields are written out at their empty or off value and say
// nothing, so losing them loses nothing; they are listed apart.
type Unmapped struct {
	Path   string // "ClusterPolicy cluster-policy spec.driver.rdma"
	Values string // "enabled=true useHostMofed=false"
	Reason string
	Inert  bool
}

// Why a GPU Operator field has no GPUPolicy equivalent, by path pattern (a "*" matches one
// segment); the longest pattern above a field gives its reason. Every field of NVIDIA's
// ClusterPolicy and NVIDIADriver types is either read by the mapping or matched here
// (TestEveryOperatorFieldIsMappedOrExplained); "" marks a field the mapping reads.
var reasons = map[string]map[string]string{
	"ClusterPolicy": {
		"operator.initContainer":                                "the operator's init container (it copies the CUDA validation workload) has no counterpart: the node agent's gates validate each stage",
		"operator.labels":                                       "labels of the operator's own Deployment: gpupolicy runs no operator",
		"operator.annotations":                                  "annotations of the operator's own Deployment: gpupolicy runs no operator",
		"operator.use_ocp_driver_toolkit":                       "OpenShift Driver Toolkit builds: gpupolicy supports containerd clusters with NVIDIA's prebuilt driver images or a preinstalled driver",
		"daemonsets.labels":                                     "extra labels on every operand pod: add them with a kustomize labels transformer over the rendered tree (the app.kubernetes.io labels are gpupolicy's)",
		"daemonsets.annotations":                                "extra annotations on every operand pod: add them with a kustomize patch over the rendered tree",
		"daemonsets.rollingUpdate":                              "the operands' updateStrategy is OnDelete, so the rolling update bound does not apply",
		"daemonsets.updateStrategy":                             "OnDelete for every operand: gpupolicy rolls every DaemonSet but the driver's (which is OnDelete and replaced by the node agents' upgrade slots)",
		"driver.usePrecompiled":                                 "precompiled driver images (tag <branch>-<kernel>-<os>): driver.source container uses the image <version>-<os>, which builds the module on the node",
		"driver.useOpenKernelModules":                           "deprecated, and no longer honoured by the GPU Operator: its kernelModuleType (spec.driver.kernelModuleType) chooses the flavour",
		"driver.startupProbe":                                   "the driver container's probes are gpupolicy's own (the node agent's driver validator decides readiness)",
		"driver.livenessProbe":                                  "the driver container's probes are gpupolicy's own (the node agent's driver validator decides readiness)",
		"driver.readinessProbe":                                 "the driver container's probes are gpupolicy's own (the node agent's driver validator decides readiness)",
		"driver.rdma":                                           "GPUDirect RDMA (nvidia-peermem, MOFED) is not part of v1alpha1",
		"driver.upgradePolicy.autoUpgrade":                      "the node agents always replace a changed container driver through their upgrade slots; to hold an upgrade, do not merge the driver.version change",
		"driver.upgradePolicy.maxParallelUpgrades":              "driver.upgrade.maxUnavailable alone bounds how many nodes of a pool upgrade at once",
		"driver.upgradePolicy.podDeletion":                      "GPU pods are always evicted through the Eviction API before the driver pod is replaced (driver.upgrade.drain); force and emptyDir deletion are not offered",
		"driver.upgradePolicy.drain.force":                      "evictions respect PodDisruptionBudgets; pods without a controller are evicted too, so there is nothing to force",
		"driver.upgradePolicy.drain.deleteEmptyDir":             "evictions through the Eviction API remove emptyDir volumes with the pod; there is no separate switch",
		"driver.upgradePolicy.drain.timeoutSeconds":             "drain.enable is false, so no pod is evicted and the timeout does nothing (gpupolicy refuses a setting that does nothing)",
		"driver.upgradePolicy.drain.podSelector":                "drain.enable is false, so no pod is evicted and the selector does nothing (gpupolicy refuses a setting that does nothing)",
		"driver.upgradePolicy.waitForCompletion.timeoutSeconds": "waitForCompletion.podSelector is empty, so nothing is waited for and the timeout does nothing (gpupolicy refuses a setting that does nothing)",
		"driver.imagePullPolicy":                                "gpupolicy pins images by tag and uses Kubernetes' default pull policy",
		"driver.manager":                                        "the k8s-driver-manager init container (it evicts GPU pods before a driver swap): the node agents' upgrade slots do that",
		"driver.resources":                                      "the driver container's resources are not configurable in v1alpha1",
		"driver.args":                                           "extra arguments of NVIDIA's driver container are not configurable in v1alpha1",
		"driver.env":                                            "extra environment of NVIDIA's driver container is not configurable in v1alpha1",
		"driver.repoConfig":                                     "a package repository mirror for the driver build: not in v1alpha1 (mirror the driver image instead, spec.registry)",
		"driver.certConfig":                                     "custom certificates for the driver build: not in v1alpha1",
		"driver.licensingConfig":                                "vGPU guest licensing: gpupolicy does not manage vGPU guests' licences",
		"driver.virtualTopology":                                "vGPU topology daemon: not in v1alpha1",
		"driver.kernelModuleConfig":                             "kernel module parameters (a ConfigMap of nvidia.conf): not in v1alpha1",
		"toolkit.imagePullPolicy":                               "gpupolicy pins images by tag and uses Kubernetes' default pull policy",
		"toolkit.args":                                          "extra arguments of the toolkit container: gpupolicy's toolkit stage writes the containerd drop-in itself",
		"toolkit.env":                                           "this toolkit container variable has no counterpart: gpupolicy's toolkit stage writes a reviewed containerd drop-in instead of letting the installer edit config.toml",
		"toolkit.installDir":                                    "the toolkit is copied to /usr/local/nvidia/toolkit (the operator's default)",
		"devicePlugin.enabled":                                  "every GPU node runs exactly one of gpupolicy's device plugin or its DRA plugin (spec.allocation); there is no setting without either",
		"devicePlugin.repository":                               "gpupolicy runs its own device plugin (k8s-device-plugin v0.17.4 compatible) from images.gpupolicy",
		"devicePlugin.image":                                    "gpupolicy runs its own device plugin (k8s-device-plugin v0.17.4 compatible) from images.gpupolicy",
		"devicePlugin.version":                                  "gpupolicy runs its own device plugin (k8s-device-plugin v0.17.4 compatible) from images.gpupolicy",
		"devicePlugin.imagePullPolicy":                          "gpupolicy pins images by tag and uses Kubernetes' default pull policy",
		"devicePlugin.args":                                     "extra arguments of NVIDIA's device plugin: gpupolicy's device plugin takes its settings from spec.devicePlugin",
		"devicePlugin.env":                                      "this k8s-device-plugin variable has no counterpart in spec.devicePlugin",
		"devicePlugin.config":                                   "the ConfigMap it names is not in the input: pass it too to import its time-slicing settings",
		"devicePlugin.mps":                                      "the MPS root is NVIDIA's default, /run/nvidia/mps; another root has no counterpart (MPS sharing itself is read from the device plugin config: devicePlugin.sharing.mps)",
		"dcgmExporter.repository":                               "gpupolicy runs its own exporter (dcgm-exporter's metric names) from images.gpupolicy",
		"dcgmExporter.image":                                    "gpupolicy runs its own exporter (dcgm-exporter's metric names) from images.gpupolicy",
		"dcgmExporter.version":                                  "gpupolicy runs its own exporter (dcgm-exporter's metric names) from images.gpupolicy",
		"dcgmExporter.imagePullPolicy":                          "gpupolicy pins images by tag and uses Kubernetes' default pull policy",
		"dcgmExporter.args":                                     "extra arguments of dcgm-exporter: gpupolicy's exporter takes its settings from spec.exporter",
		"dcgmExporter.env":                                      "this dcgm-exporter variable has no counterpart in spec.exporter",
		"dcgmExporter.config":                                   "a custom metrics CSV: gpupolicy's exporter serves a fixed catalogue (dcgm-exporter's default counters, see plugin/exporter)",
		"dcgmExporter.serviceMonitor.honorLabels":               "the rendered ServiceMonitor's labels are fixed; patch it with kustomize if needed",
		"dcgmExporter.serviceMonitor.relabelings":               "relabelings of the ServiceMonitor: patch the rendered ServiceMonitor with kustomize",
		"dcgmExporter.service":                                  "the exporter Service is a ClusterIP Service; patch it with kustomize for another type or traffic policy",
		"dcgm":                                                  "a standalone DCGM host engine: gpupolicy's exporter reads NVML directly and needs none",
		"nodeStatusExporter":                                    "the operator's node status exporter: the node agent's GPUStackReady condition and gate-status annotation say the same",
		"gfd.repository":                                        "gpupolicy's feature discovery (gpu-feature-discovery v0.17.4's labels) runs from images.gpupolicy",
		"gfd.image":                                             "gpupolicy's feature discovery (gpu-feature-discovery v0.17.4's labels) runs from images.gpupolicy",
		"gfd.version":                                           "gpupolicy's feature discovery (gpu-feature-discovery v0.17.4's labels) runs from images.gpupolicy",
		"gfd.imagePullPolicy":                                   "gpupolicy pins images by tag and uses Kubernetes' default pull policy",
		"gfd.args":                                              "extra arguments of gpu-feature-discovery: not configurable in v1alpha1",
		"gfd.env":                                               "this gpu-feature-discovery variable has no counterpart in spec.featureDiscovery",
		"migManager":                                            "MIG layouts live in git per node pool (spec.nodePools[].mig, applied by the node agent's MIG step); declare the layouts your nodes use there (the operator's mig-parted ConfigMap names them)",
		"psp":                                                   "PodSecurityPolicies are gone from Kubernetes",
		"psa":                                                   "Pod Security Admission labels on the operator's namespace: gpupolicy's namespace is rendered with the labels its pods need",
		"validator":                                             "the operator validator: gpupolicy's node agent validates each stage and opens the next stage's gate",
		"gds":                                                   "GPUDirect Storage is not part of v1alpha1",
		"gdrcopy":                                               "GDRCopy is not part of v1alpha1",
		"sandboxWorkloads":                                      "VM passthrough and vGPU workloads (sandbox workloads): gpupolicy runs container workloads only",
		"vfioManager":                                           "VFIO for VM passthrough (sandbox workloads): gpupolicy runs container workloads only",
		"sandboxDevicePlugin":                                   "the KubeVirt device plugin (sandbox workloads): gpupolicy runs container workloads only",
		"vgpuManager":                                           "the vGPU host manager (sandbox workloads): gpupolicy runs container workloads only",
		"vgpuDeviceManager":                                     "the vGPU device manager (sandbox workloads): gpupolicy runs container workloads only",
		"kataManager":                                           "Kata containers (sandbox workloads): gpupolicy runs container workloads only",
		"ccManager":                                             "confidential computing modes: not part of v1alpha1",
		"hostPaths.rootFS":                                      "gpupolicy's node programs mount the host's / as --host-root",
		"hostPaths.driverInstallDir":                            "the driver container's root: gpupolicy uses the operator's default /run/nvidia/driver",
	},
	"NVIDIADriver": {
		"driverType":            "only the gpu driver type: vGPU host managers and guests are not part of v1alpha1",
		"usePrecompiled":        "precompiled driver images (tag <branch>-<kernel>-<os>): driver.source container uses the image <version>-<os>",
		"useOpenKernelModules":  "deprecated, and no longer honoured by the GPU Operator: its kernelModuleType (driver.kernelModuleType) chooses the flavour",
		"startupProbe":          "the driver container's probes are gpupolicy's own (the node agent's driver validator decides readiness)",
		"livenessProbe":         "the driver container's probes are gpupolicy's own (the node agent's driver validator decides readiness)",
		"readinessProbe":        "the driver container's probes are gpupolicy's own (the node agent's driver validator decides readiness)",
		"rdma":                  "GPUDirect RDMA (nvidia-peermem, MOFED) is not part of v1alpha1",
		"gds":                   "GPUDirect Storage is not part of v1alpha1",
		"gdrcopy":               "GDRCopy is not part of v1alpha1",
		"imagePullPolicy":       "gpupolicy pins images by tag and uses Kubernetes' default pull policy",
		"manager":               "the k8s-driver-manager init container (it evicts GPU pods before a driver swap): the node agents' upgrade slots do that",
		"resources":             "the driver container's resources are not configurable in v1alpha1",
		"args":                  "extra arguments of NVIDIA's driver container are not configurable in v1alpha1",
		"env":                   "extra environment of NVIDIA's driver container is not configurable in v1alpha1",
		"repoConfig":            "a package repository mirror for the driver build: not in v1alpha1 (mirror the driver image instead, spec.registry)",
		"certConfig":            "custom certificates for the driver build: not in v1alpha1",
		"licensingConfig":       "vGPU guest licensing: gpupolicy does not manage vGPU guests' licences",
		"virtualTopologyConfig": "vGPU topology daemon: not in v1alpha1",
		"kernelModuleConfig":    "kernel module parameters (a ConfigMap of nvidia.conf): not in v1alpha1",
		"nodeAffinity":          "a pool is selected by nodeSelector labels only; express the affinity as labels",
		"labels":                "extra labels on the driver pods: add them with a kustomize labels transformer",
		"annotations":           "extra annotations on the driver pods: add them with a kustomize patch",
		"tolerations":           "tolerations are policy-wide (spec.tolerations); the pool's driver DaemonSet gets those",
		"priorityClassName":     "the priority class is policy-wide (spec.priorityClassName)",
	},
}

// reasonFor is the reason of the longest pattern of kind's table above path, and the prefix
// of path it matched; ok is false when no pattern matches.
func reasonFor(kind, path string) (reason, prefix string, ok bool) {
	segs := strings.Split(path, ".")
	best := -1
	for pat, r := range reasons[kind] {
		ps := strings.Split(pat, ".")
		if len(ps) > len(segs) || len(ps) <= best {
			continue
		}
		match := true
		for i, p := range ps {
			if p != "*" && p != segs[i] {
				match = false
				break
			}
		}
		if match {
			best, reason = len(ps), r
		}
	}
	if best < 0 {
		return "", "", false
	}
	return reason, strings.Join(segs[:best], "."), true
}

// unmapped lists what f sets and the mapping did not read, one entry per reason's path, in
// path order.
func (f *fields) unmapped() []Unmapped {
	var out []Unmapped
	index := map[string]int{}
	for _, l := range f.leaves() {
		if f.read(l.path) {
			continue
		}
		reason, prefix, ok := reasonFor(f.kind, l.path)
		if !ok || reason == "" {
			reason, prefix = "not known to this version of gpupolicy-fn import: check whether the GPUPolicy needs it", l.path
		}
		i, seen := index[prefix]
		if !seen {
			i = len(out)
			index[prefix] = i
			out = append(out, Unmapped{Path: f.path(prefix), Reason: reason, Inert: true})
		}
		u := &out[i]
		name := strings.TrimPrefix(strings.TrimPrefix(l.path, prefix), ".")
		val := show(l.value)
		if name != "" {
			val = name + "=" + val
		}
		u.Values = strings.TrimSpace(u.Values + " " + val)
		u.Inert = u.Inert && inert(l.value)
	}
	return out
}

func show(v any) string {
	if s, ok := v.(string); ok {
		if s == "" {
			return `""`
		}
		return s
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// WriteReport writes the unmapped fields for a person: those that said something first, each
// with its reason, then the inert ones in one list.
func WriteReport(w io.Writer, us []Unmapped) {
	var inertPaths []string
	n := 0
	for _, u := range us {
		if u.Inert {
			inertPaths = append(inertPaths, u.Path)
			continue
		}
		if n == 0 {
			fmt.Fprintln(w, "gpupolicy-fn import: these fields of the input have no GPUPolicy equivalent and were not carried over:")
		}
		n++
		fmt.Fprintf(w, "  - %s (%s): %s\n", u.Path, u.Values, u.Reason)
	}
	if len(inertPaths) > 0 {
		fmt.Fprintf(w, "gpupolicy-fn import: %d fields are set to their empty or off value and need nothing: %s\n", len(inertPaths), strings.Join(inertPaths, ", "))
	}
}
