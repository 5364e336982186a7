package render

import (
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/mig"
)

// NameMIGManager is the DaemonSet of the agent's MIG step.
const NameMIGManager = config.DaemonSetMIGManager

// migPools are the node pools that declare MIG layouts, in policy order.
func migPools(p *v1alpha1.GPUPolicy) []*v1alpha1.NodePool {
	var out []*v1alpha1.NodePool
	for i := range p.Spec.NodePools {
		if p.Spec.NodePools[i].MIG != nil {
			out = append(out, &p.Spec.NodePools[i])
		}
	}
	return out
}

// migParted is a pool's layouts as mig-parted's config file, so a reviewer reads the same
// format GPU Operator's MIG manager takes and an existing config carries over. A comment names
// the pool's layout (mig-parted ignores it; a diff of the ConfigMap then shows a new default
// too); version comes first, as in mig-parted's own examples; sigs.k8s.io/yaml sorts every map.
func migParted(pool string, m *v1alpha1.MIG) ([]byte, error) {
	cfgs := map[string][]mig.DeviceConfig{}
	for _, name := range slices.Sorted(maps.Keys(m.Layouts)) {
		var entries []mig.DeviceConfig
		for _, g := range m.Layouts[name] {
			entries = append(entries, mig.DeviceConfig{
				Devices:    mig.Devices{All: g.Devices.All, Indexes: g.Devices.Indexes},
				MigEnabled: g.GetMIGEnabled(),
				MigDevices: g.Profiles,
			})
		}
		cfgs[name] = entries
	}
	body, err := yaml.Marshal(map[string]any{"mig-configs": cfgs})
	if err != nil {
		return nil, err
	}
	head := fmt.Sprintf("# node pool %s: layout %s unless a node's label %s names another of these\nversion: %s\n",
		pool, m.GetLayout(), config.LabelMIGConfig, mig.ConfigVersion)
	return append([]byte(head), body...), nil
}

// agentMIG is what the agent config says about a pool's MIG layouts.
func agentMIG(np *v1alpha1.NodePool) *config.AgentMIG {
	if np.MIG == nil {
		return nil
	}
	return &config.AgentMIG{
		Layout:     np.MIG.GetLayout(),
		Layouts:    slices.Sorted(maps.Keys(np.MIG.Layouts)),
		ConfigFile: config.MIGConfigFile(np.Name),
		GPUProduct: np.MIG.GPUProduct,
	}
}

// renderMIG makes the layouts' ConfigMap and the MIG step's DaemonSet. The step runs where
// the gate opened nvidia.com/gpu.deploy.mig-manager (nodes of a pool with MIG, toolkit stage
// done: it needs NVML). It is not privileged: the nvidia runtime injects the MIG
// configuration capability (NVIDIA_MIG_CONFIG_DEVICES=all), which needs CAP_SYS_ADMIN, and
// NVML's MIG calls need uid 0. It reads the kubelet's pod-resources socket to refuse GPUs that
// pods hold, writes only /var/lib/gpupolicy of the host (what it applied, for the toolkit
// stage's CDI spec), and uses the node agent's identity (labels of its own node, Events).
func renderMIG(c *plan) (Objects, error) {
	pools := migPools(c.p)
	if len(pools) == 0 {
		return nil, nil
	}
	data := map[string]string{}
	for _, np := range pools {
		b, err := migParted(np.Name, np.MIG)
		if err != nil {
			return nil, err
		}
		data[config.MIGConfigFile(np.Name)] = string(b)
	}
	cm := Object{Stage: StagePrereqs, Component: "mig-manager", Obj: &corev1.ConfigMap{
		TypeMeta:   typeMeta("v1", "ConfigMap"),
		ObjectMeta: c.meta(config.MIGConfigMap, true),
		Data:       data,
	}}
	var hashed []byte
	for _, k := range slices.Sorted(maps.Keys(data)) {
		hashed = append(hashed, data[k]...)
	}
	ms := []mount{
		agentConfigMount(),
		configMapMount("mig-config", config.MIGConfigMap, config.MIGConfigDir),
		hostPath("pod-resources", podResourcesDir, corev1.HostPathDirectory, podResourcesDir, true),
		// The step records the MIG devices it made (config.MIGAppliedFile) for the toolkit
		// stage, which regenerates the CDI spec from them.
		stateMount(false),
	}
	if c.cdiSpec() {
		// Read-only: success waits until the toolkit stage's spec names the new MIG devices.
		ms = append(ms, hostPath("host-cdi", cdiDir, corev1.HostPathDirectoryOrCreate, hostRoot+cdiDir, true))
	}
	vols, mounts := volumesAndMounts(ms...)
	sc := asRoot(unprivileged())
	sc.Capabilities.Add = []corev1.Capability{"SYS_ADMIN"}
	ds, err := c.build(daemonSet{
		name: NameMIGManager, component: "mig-manager", row: config.StageMIGManager,
		serviceAccount: NameNodeAgent,
		runtimeClass:   true,
		configs:        [][]byte{c.agentConfig, hashed},
		volumes:        vols,
		containers: []corev1.Container{{
			Name:  "mig-manager",
			Image: c.images.gpupolicy,
			Command: []string{"gpu-node-agent", "mig",
				"--config", config.AgentConfigPath,
				"--mig-config-dir", config.MIGConfigDir,
				"--host-root", hostRoot,
				"--pod-resources-socket", podResourcesSocket},
			Env: append([]corev1.EnvVar{nodeNameEnv()}, append(nvmlEnv(),
				corev1.EnvVar{Name: "NVIDIA_MIG_CONFIG_DEVICES", Value: "all"},
				corev1.EnvVar{Name: "NVIDIA_MIG_MONITOR_DEVICES", Value: "all"})...),
			Resources:       resources("10m", "32Mi", "128Mi"),
			SecurityContext: sc,
			VolumeMounts:    mounts,
		}},
	})
	if err != nil {
		return nil, err
	}
	return Objects{cm, ds}, nil
}
