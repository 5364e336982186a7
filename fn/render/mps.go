package render

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// NameMPSControlDaemon is the MPS stage's DaemonSet ("-<pool>" for a node pool's).
const NameMPSControlDaemon = config.DaemonSetMPSControlDaemon

// mpsPort serves the daemon's /readyz and /healthz.
const mpsPort = 8083

// mpsPools are the device plugin pools that share their GPUs with MPS.
func mpsPools(p *v1alpha1.GPUPolicy) []pool {
	var out []pool
	for _, pl := range devicePluginPools(p) {
		if pl.allocation != v1alpha1.AllocationDRA && pl.settings.Sharing.GetMPS() != nil {
			out = append(out, pl)
		}
	}
	return out
}

// renderMPS makes the MPS control daemon of each pool that shares GPUs with MPS, where the
// gate opened nvidia.com/gpu.deploy.mps-control-daemon, placed as the pool's device plugin.
// NVIDIA's runs privileged, to mount a tmpfs for /dev/shm with bidirectional propagation; this
// one mounts <mps root>/shm from the host's /run, a tmpfs already, and runs as uid 0 without
// privilege or capabilities: NVML's compute mode and the control daemon need root, not more.
// The nvidia runtime injects NVML, the GPUs and the driver's MPS programs ("compute").
func renderMPS(c *plan) (Objects, error) {
	var out Objects
	for _, pl := range mpsPools(c.p) {
		vols, mounts := volumesAndMounts(
			configMapMount("device-plugin-config", config.DevicePluginConfigMap+pl.suffix(), config.DevicePluginDir),
			hostPath("mps-root", config.MPSHostRoot, corev1.HostPathDirectoryOrCreate, config.MPSContainerRoot, false),
			hostPath("mps-shm", config.MPSShmDir(config.MPSHostRoot), corev1.HostPathDirectoryOrCreate, "/dev/shm", false),
			hostPath("host-sys", "/sys", corev1.HostPathDirectory, hostRoot+"/sys", true),
		)
		obj, err := c.poolDaemonSet(pl, config.StageMPSControlDaemon, NameMPSControlDaemon, "mps-control-daemon", NameDevicePlugin, vols, corev1.Container{
			Name:  "mps-control-daemon",
			Image: c.images.gpupolicy,
			Command: []string{"gpu-device-plugin", "mps-control-daemon",
				"--config", config.DevicePluginDir + "/" + config.DevicePluginFile,
				"--mps-dir", config.MPSContainerRoot,
				"--host-root", hostRoot},
			Env:            append([]corev1.EnvVar{nodeNameEnv()}, computeEnv()...),
			Ports:          []corev1.ContainerPort{{Name: "health", ContainerPort: mpsPort}},
			ReadinessProbe: httpProbe("/readyz", mpsPort, 10, 3),
			LivenessProbe:  httpProbe("/healthz", mpsPort, 30, 3),
			Resources:      resources("10m", "32Mi", "128Mi"),
			// uid 0 without privilege or capabilities; the root filesystem stays read-only
			// (the daemon writes only the MPS root and /dev/shm, both mounted).
			SecurityContext: asRoot(unprivileged()),
			VolumeMounts:    mounts,
		})
		if err != nil {
			return nil, err
		}
		out = append(out, obj)
	}
	return out, nil
}
