package render

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"

	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// kubeletDevicePluginDir is where the kubelet's registration socket lives and plugins put theirs.
const kubeletDevicePluginDir = "/var/lib/kubelet/device-plugins"

// renderDevicePlugins makes one device plugin DaemonSet per node pool and one for the GPU nodes
// outside every pool, each reading its own ConfigMap; a pool (or the rest) with allocation dra
// gets the DRA plugin (dra.go) instead, so a node is served by exactly one of the two. The
// device plugin runs unprivileged under the nvidia runtime class (NVML is injected); it only
// writes its socket into the kubelet's directory and reads the host's PCI topology.
func renderDevicePlugins(c *plan) (Objects, error) {
	var out Objects
	for _, pl := range devicePluginPools(c.p) {
		if pl.allocation == v1alpha1.AllocationDRA {
			obj, err := c.renderDRAPlugin(pl)
			if err != nil {
				return nil, err
			}
			out = append(out, obj)
			continue
		}
		ms := []mount{
			configMapMount("device-plugin-config", config.DevicePluginConfigMap+pl.suffix(), config.DevicePluginDir),
			hostPath("device-plugins", kubeletDevicePluginDir, corev1.HostPathDirectory, kubeletDevicePluginDir, false),
			hostPath("host-sys", "/sys", corev1.HostPathDirectory, hostRoot+"/sys", true),
		}
		if pl.settings.Sharing.GetMPS() != nil {
			// Read-only: the plugin serves once the MPS control daemon's record says so.
			ms = append(ms, hostPath("mps-root", config.MPSHostRoot, corev1.HostPathDirectoryOrCreate, config.MPSContainerRoot, true))
		}
		vols, mounts := volumesAndMounts(ms...)
		obj, err := c.buildPluginDaemonSet(pl, NameDevicePlugin, "device-plugin", vols, corev1.Container{
			Name:  "device-plugin",
			Image: c.images.gpupolicy,
			Command: []string{"gpu-device-plugin",
				"--config", config.DevicePluginDir + "/" + config.DevicePluginFile,
				"--plugin-dir", kubeletDevicePluginDir,
				"--host-root", hostRoot},
			Env:       append([]corev1.EnvVar{nodeNameEnv()}, nvmlEnv()...),
			Resources: resourcesOr(pl.settings.Resources, "20m", "64Mi", "256Mi"),
			// uid 0 without capabilities or privilege: the plugin creates its socket in the
			// kubelet's root-owned device-plugins directory and dials the root-owned
			// kubelet.sock there; the image's default user (65532) could do neither.
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

// buildPluginDaemonSet is the DaemonSet of the plugin that hands one node group's GPUs to pods
// (the device plugin or the DRA plugin, named <name>[-<pool>]): the device-plugin stage, its
// gate, the pool's placement (the group outside the pools excludes them), NVML through the
// runtime class, the pool's update strategy and the pool's ConfigMap in the config hash.
func (c *plan) buildPluginDaemonSet(pl pool, name, component string, vols []corev1.Volume, container corev1.Container) (Object, error) {
	return c.poolDaemonSet(pl, config.StageDevicePlugin, name, component, name, vols, container)
}

// poolDaemonSet is the DaemonSet <name>[-<pool>] of stage row that runs a program of one device
// plugin pool's nodes (the plugins, the MPS control daemon): placed as the pool, NVML through the
// runtime class, the pool's update strategy, the pool's device plugin ConfigMap in its config hash.
func (c *plan) poolDaemonSet(pl pool, row, name, component, serviceAccount string, vols []corev1.Volume, container corev1.Container) (Object, error) {
	return c.build(daemonSet{
		name: name + pl.suffix(), component: component, row: row,
		serviceAccount: serviceAccount,
		placement:      placement{pool: pl.selector, exclude: c.excludedBy(pl.name)},
		runtimeClass:   true,
		maxUnavailable: maxUnavailableOf(pl.settings.UpdateStrategy),
		configs:        [][]byte{c.devicePluginConfigs[pl.name]},
		volumes:        vols,
		containers:     []corev1.Container{container},
	})
}

// excludedBy are the pools the device plugin of pool keeps off: all of them for the nodes
// outside every pool ("").
func (c *plan) excludedBy(pool string) []*v1alpha1.NodePool {
	if pool != "" {
		return nil
	}
	out := make([]*v1alpha1.NodePool, len(c.p.Spec.NodePools))
	for i := range c.p.Spec.NodePools {
		out[i] = &c.p.Spec.NodePools[i]
	}
	return out
}
