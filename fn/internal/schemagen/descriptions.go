package main

// descriptions document the fields whose Go comment is missing or only lists enum values. They
// take precedence over the Go comment; once types.go documents a field fully, its entry here
// can go. TestEveryFieldDescribed keeps new fields from shipping undocumented.
var descriptions = map[string]string{
	"ContainerRuntime.Name":           "Container runtime of the nodes. Only containerd in v1alpha1.",
	"ContainerRuntime.ConfigPath":     "Path of containerd's main config file on the node; the toolkit stage reads it to carry the node's own CRI settings into the drop-in where containerd would otherwise drop them.",
	"ContainerRuntime.DropInDir":      "Directory containerd imports drop-in files from; the toolkit stage writes 99-gpupolicy-nvidia.toml there. Neither configPath nor a directory above or below it.",
	"ContainerRuntime.Socket":         "containerd's socket on the node; the toolkit stage uses it to verify containerd loaded the runtime handler.",
	"ContainerRuntime.RestartMode":    "How the toolkit stage makes containerd load a changed drop-in: systemd (restart the unit), signal (signal containerd so its supervisor restarts it), none (a person restarts containerd; the gate stays closed until the handler is loaded). containerd is restarted only when the drop-in's bytes changed.",
	"Driver.Source":                   "preinstalled: the host image has the driver and the driver stage only validates it (unprivileged). container: NVIDIA's driver container (image:<version>-<os>) builds and loads it (privileged).",
	"Driver.Version":                  "Expected driver version MAJOR.MINOR[.PATCH] as nvidia-smi prints it, e.g. \"580.95.05\" (quote it). The patch is required from R450 on (\"580.95\" is refused; only older branches, like 390.144, have none) and has two digits: \"580.95.5\" is refused with the spelling to write, the node agent's rule (plugin/config). A node with another version is drift, see enforce.",
	"Driver.Enforce":                  "What a node's driver must match before its toolkit gate opens: exact (the full version), branch (the same branch, e.g. 580), none (any driver; drift is only labelled).",
	"Driver.Image":                    "Repository of NVIDIA's driver image for source=container; the tag is <version>-<os>.",
	"CUDA.Version":                    "CUDA version of the workloads, e.g. \"12.8\" (quote it); driver.version must be at least the minimum driver of this CUDA major.",
	"Toolkit.Source":                  "container: an init container copies nvidia-container-toolkit from toolkit.image to /usr/local/nvidia/toolkit on the node. preinstalled: the host image already has it.",
	"Toolkit.Version":                 "nvidia-container-toolkit version; the image tag for source=container.",
	"Toolkit.Image":                   "Repository of NVIDIA's container-toolkit image (source=container).",
	"DevicePlugin.ResourceName":       "Extended resource the device plugin advertises; pods request it in resources.limits.",
	"DevicePlugin.MIGStrategy":        "How MIG devices are advertised: none (whole GPUs), single (every GPU of a node has the same MIG layout; slices advertised as resourceName), mixed (one resource per MIG profile, nvidia.com/mig-<profile>).",
	"DevicePlugin.DeviceListStrategy": "How allocated devices reach the container: cdi-cri (CDI device names in the CRI response; needs toolkit.cdi) or envvar (NVIDIA_VISIBLE_DEVICES).",
	"TimeSlicing.Replicas":            "How many times each GPU is advertised; 1 means no sharing. Containers sharing a GPU get no memory or fault isolation from each other. At most 256: the device plugin lists every replica in one ListAndWatch message, which must stay within gRPC's 4 MiB for a node of 16 GPUs with 7 MIG devices each. An explicit 0 is an error, not the default.",
	"HealthChecks.Enabled":            "Mark a device Unhealthy when NVML reports a critical XID for it, and Healthy again after it recovers.",
	"HealthChecks.IgnoredXIDs":        "XIDs caused by applications, not by the GPU; they never mark a device Unhealthy.",
	"FeatureDiscovery.Enabled":        "Run the gpu-feature-discovery stage: the node labels gpu-feature-discovery v0.17.4 writes, same names and values (nvidia.com/gpu.product, gpu.memory, gpu.count, gpu.family, gpu.machine, gpu.mode, gpu.replicas, gpu.sharing-strategy, mig.*, mps.capable, vgpu.present, cuda.*; not its timestamp), checked against its own labelers.",
	"Exporter.Enabled":                "Run the metrics exporter stage (dcgm-exporter's metric and label names).",
	"Exporter.Port":                   "Port the exporter listens on and its Service exposes; 1024–65535, because the exporter runs without NET_BIND_SERVICE.",
	"Exporter.Interval":               "How often the exporter reads NVML and Prometheus scrapes it (the ServiceMonitor's interval), a Go duration (\"15s\"): from 1s to 2m30s, half of Prometheus' 5-minute lookback, so GPU series never go stale between scrapes and the alerts' 10-minute windows hold several samples.",
	"Exporter.ServiceMonitor":         "Also render a Prometheus Operator ServiceMonitor for the exporter's Service.",
	"Exporter.PodAttribution":         "Label GPU metrics with pod, namespace and container from the kubelet pod-resources API.",
	"NodePool.Name":                   "Pool name (a DNS-1123 label); names the pool's device plugin DaemonSet and ConfigMap (gpu-device-plugin-<name>, a label value too), so at most 45 characters.",
	"NodePool.NodeSelector":           "Labels that select the pool's nodes among the GPU nodes. Pools must be disjoint; the device plugin DaemonSet for the remaining GPU nodes excludes every pool. Not the stage gates (nvidia.com/gpu.deploy.*, gpu.toolkit.ready); a feature label (nvidia.com/gpu.product, ...) draws a warning, because the node joins the pool only once feature discovery labelled it.",
	"NodePool.DevicePlugin":           "Device plugin settings of the pool; every unset field falls back to spec.devicePlugin.",
	"Guardrails.Enabled":              "Render the ValidatingAdmissionPolicy and binding that let the node agent change only nvidia.com/ labels and annotations and its GPUStackReady condition, and only of its own node.",
	"Images.GPUPolicy":                "This project's image (all node programs). Default: ghcr.io/gpupolicy/gpupolicy at the function's own version, so a rendered tree pins the programs tested with the function that rendered it.",
	"ObjectMeta.Name":                 "Name of the policy; results and rendered objects refer to it. At most 63 characters (the app.kubernetes.io/instance label value of every object), 45 with gitops: flux (<name>-container-toolkit names a Flux Kustomization, whose name Flux also writes as a label value).",
}
