package render

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// pool is one device plugin deployment: a node pool, or (name "") the GPU nodes outside every pool.
type pool struct {
	name     string
	selector map[string]string // the pool's nodeSelector; nil for the rest
	settings *v1alpha1.DevicePlugin
	// allocation: devicePlugin or dra, which plugin serves the pool's nodes.
	allocation string
}

// devicePluginPools lists the rest first, then the node pools in policy order.
func devicePluginPools(p *v1alpha1.GPUPolicy) []pool {
	out := []pool{{settings: &p.Spec.DevicePlugin, allocation: p.Spec.Allocation}}
	for i := range p.Spec.NodePools {
		np := &p.Spec.NodePools[i]
		out = append(out, pool{name: np.Name, selector: np.NodeSelector, settings: np.DevicePlugin, allocation: np.Allocation})
	}
	return out
}

// suffix is the "-<pool>" of the pool's object names.
func (pl pool) suffix() string {
	if pl.name == "" {
		return ""
	}
	return "-" + pl.name
}

func devicePluginConfig(poolName, allocation string, dp *v1alpha1.DevicePlugin) config.DevicePlugin {
	if allocation != v1alpha1.AllocationDRA {
		allocation = "" // the device plugin: left out, so its documents stay as they were
	}
	return config.DevicePlugin{
		Pool:               poolName,
		Allocation:         allocation,
		ResourceName:       dp.ResourceName,
		MIGStrategy:        dp.MIGStrategy,
		DeviceListStrategy: dp.DeviceListStrategy,
		Sharing:            sharingConfig(dp.Sharing, allocation),
		HealthChecks: config.HealthChecks{
			Enabled:     v1alpha1.Bool(dp.HealthChecks.Enabled),
			IgnoredXIDs: dp.HealthChecks.IgnoredXIDs,
		},
	}
}

// sharingConfig is the device plugin's sharing: MPS when set (time-slicing then 1), except
// under DRA, whose plugin shares per claim and refuses a pool's MPS.
func sharingConfig(s *v1alpha1.Sharing, allocation string) config.Sharing {
	out := config.Sharing{TimeSlicing: config.TimeSlicing{Replicas: s.TimeSlicing.GetReplicas()}}
	if m := s.GetMPS(); m != nil && allocation != v1alpha1.AllocationDRA {
		out.MPS = &config.MPS{Replicas: m.GetReplicas()}
	}
	return out
}

// agentConfig is everything the node agent verifies and labels, from the policy.
func agentConfig(p *v1alpha1.GPUPolicy, dropInSHA256 string) config.Agent {
	s := &p.Spec
	cr := &s.ContainerRuntime
	a := config.Agent{
		Interval:    config.DefaultAgentInterval.String(),
		Driver:      agentDriver(s.Registry, s.Driver),
		CUDAVersion: s.CUDA.Version,
		ContainerRuntime: config.ContainerRuntime{
			Name: cr.Name, Version: cr.Version, ConfigPath: cr.ConfigPath,
			DropInDir: cr.DropInDir, Socket: cr.Socket, RestartMode: cr.RestartMode,
		},
		Toolkit: config.AgentToolkit{
			Source:           s.Toolkit.Source,
			Version:          s.Toolkit.Version,
			RuntimeClassName: s.Toolkit.RuntimeClassName,
			RuntimePath:      runtimePath(&s.Toolkit),
			CDI:              v1alpha1.Bool(s.Toolkit.CDI),
			DropInSHA256:     dropInSHA256,
		},
		Stages: config.Stages{
			FeatureDiscovery: v1alpha1.Bool(s.FeatureDiscovery.Enabled),
			Exporter:         v1alpha1.Bool(s.Exporter.Enabled),
		},
		DevicePlugin: devicePluginConfig("", s.Allocation, &s.DevicePlugin),
	}
	for _, np := range s.NodePools {
		a.NodePools = append(a.NodePools, config.AgentPool{
			Name: np.Name, NodeSelector: np.NodeSelector,
			DevicePlugin: devicePluginConfig(np.Name, np.Allocation, np.DevicePlugin),
			MIG:          agentMIG(&np),
		})
		if d, own := s.PoolDriver(&np); own {
			ad := agentDriver(s.Registry, d)
			a.NodePools[len(a.NodePools)-1].Driver = &ad
		}
	}
	if containerDriver(s) {
		u := s.Driver.Upgrade
		a.Upgrade = &config.AgentUpgrade{
			MaxUnavailable:         u.MaxUnavailable.String(),
			Drain:                  v1alpha1.Bool(u.Drain.Enabled),
			DrainTimeout:           u.Drain.Timeout,
			DrainPodSelector:       u.Drain.PodSelector,
			WaitForJobsPodSelector: u.WaitForJobs.PodSelector,
			WaitForJobsTimeout:     u.WaitForJobs.Timeout,
		}
	}
	a.Stages.MIG = len(migPools(p)) > 0
	a.Stages.MPS = len(mpsPools(p)) > 0
	return a
}

// agentDriver is a driver stage as the agent checks it; the image only where one runs.
func agentDriver(registry string, d v1alpha1.Driver) config.AgentDriver {
	ad := config.AgentDriver{Source: d.Source, Version: d.Version, Enforce: d.Enforce, OnDrift: d.OnDrift}
	if d.KernelModuleType != v1alpha1.KernelModulesAuto {
		ad.KernelModules = d.KernelModuleType
	}
	if d.Source == v1alpha1.SourceContainer {
		ad.Image = DriverImage(registry, d)
	}
	return ad
}

// containerDriver reports whether some driver stage runs NVIDIA's driver container, which the
// agents then upgrade node by node.
func containerDriver(s *v1alpha1.Spec) bool {
	if s.Driver.Source == v1alpha1.SourceContainer {
		return true
	}
	for _, np := range s.DriverPools() {
		if d, _ := s.PoolDriver(np); d.Source == v1alpha1.SourceContainer {
			return true
		}
	}
	return false
}

// renderConfigMaps: the containerd drop-in as reviewable text, the agent's config and one
// device plugin config per pool. They are prerequisites: every DaemonSet mounts one.
func renderConfigMaps(c *plan) (Objects, error) {
	out := Objects{
		c.configMap("containerd", config.DropInConfigMap, config.DropInFile, c.dropIn),
		c.configMap("node-agent", config.AgentConfigMap, config.AgentConfigFile, string(c.agentConfig)),
	}
	for _, pl := range devicePluginPools(c.p) {
		out = append(out, c.configMap("device-plugin", config.DevicePluginConfigMap+pl.suffix(),
			config.DevicePluginFile, string(c.devicePluginConfigs[pl.name])))
	}
	return out, nil
}

func (c *plan) configMap(component, name, key, value string) Object {
	return Object{Stage: StagePrereqs, Component: component, Obj: &corev1.ConfigMap{
		TypeMeta:   typeMeta("v1", "ConfigMap"),
		ObjectMeta: c.meta(name, true),
		Data:       map[string]string{key: value},
	}}
}
