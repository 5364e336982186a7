package v1alpha1

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/version"
)

// Documented defaults (fn/api/v1alpha1/README.md). kubernetesVersion, driver.version and
// cuda.version have none: they are the version matrix a person must choose. The defaults of
// spec.devicePlugin and its enumerations (MIG and device-list strategies) are the node
// contract's, in plugin/config, because the device plugin runs with them too.
const (
	DefaultNamespace         = "gpu-system"
	DefaultGitOps            = GitOpsArgoCD
	DefaultDiscovery         = DiscoveryBuiltin
	DefaultAllocation        = AllocationDevicePlugin
	DefaultPriorityClassName = "system-node-critical"
	DefaultRuntimeName       = "containerd"
	DefaultContainerdVersion = "2.1"
	DefaultConfigPath        = "/etc/containerd/config.toml"
	DefaultDropInDir         = "/etc/containerd/conf.d"
	DefaultSocket            = "/run/containerd/containerd.sock"
	DefaultRestartMode       = RestartSystemd
	DefaultDriverSource      = SourcePreinstalled
	DefaultDriverEnforce     = EnforceBranch
	DefaultDriverImage       = "nvcr.io/nvidia/driver"
	DefaultDriverOS          = "ubuntu24.04"
	DefaultDriverOnDrift     = OnDriftReport
	DefaultKernelModuleType  = KernelModulesAuto
	// GPU Operator's driver upgrade policy defaults (maxUnavailable 25%, no wait for jobs),
	// with drain on: replacing a driver under a running GPU job kills the job.
	DefaultUpgradeMaxUnavailable = "25%"
	DefaultDrainTimeout          = "10m"
	DefaultWaitForJobsTimeout    = "0s"
	DefaultToolkitSource         = SourceContainer
	DefaultToolkitVersion        = "1.18.0"
	DefaultToolkitImage          = "nvcr.io/nvidia/k8s/container-toolkit"
	DefaultRuntimeClassName      = "nvidia"
	DefaultExporterPort          = 9400
	DefaultExporterInterval      = "15s"
)

// Enumerations of the contract.
const (
	GitOpsArgoCD = "argocd"
	GitOpsFlux   = "flux"
	GitOpsNone   = "none"

	DiscoveryBuiltin = "builtin"
	DiscoveryNFD     = "nfd"
	DiscoveryNone    = "none"

	AllocationDevicePlugin = "devicePlugin"
	AllocationDRA          = "dra"

	RestartSystemd = "systemd"
	RestartSignal  = "signal"
	RestartNone    = "none"

	SourcePreinstalled = "preinstalled"
	SourceContainer    = "container"

	EnforceExact  = "exact"
	EnforceBranch = "branch"
	EnforceNone   = "none"

	OnDriftReport = "report"
	OnDriftTaint  = "taint"

	KernelModulesAuto        = config.KernelModulesAuto
	KernelModulesOpen        = config.KernelModulesOpen
	KernelModulesProprietary = config.KernelModulesProprietary
)

// DefaultNodeSelector is the entry gate when spec.nodeSelector is empty.
func DefaultNodeSelector() map[string]string {
	return map[string]string{config.LabelGPUPresent: "true"}
}

// DefaultTolerations tolerate the taint GPU nodes commonly carry.
func DefaultTolerations() []corev1.Toleration {
	return []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
}

// DefaultGPUPolicyImage is this project's image at the function's own version.
func DefaultGPUPolicyImage() string { return version.Image + ":" + version.Version }

// Bool returns the value of an optional boolean; nil (unset) reads as false. After Default
// every optional boolean of the contract is set.
func Bool(b *bool) bool { return b != nil && *b }

func ptr[T any](v T) *T { return &v }

func orDefault(s *string, def string) {
	if *s == "" {
		*s = def
	}
}

func boolDefault(b **bool, def bool) {
	if *b == nil {
		*b = ptr(def)
	}
}

// GetReplicas is the number of time-slicing replicas: the value set, else the default. After
// Default it is always the value set or inherited.
func (t *TimeSlicing) GetReplicas() int {
	if t == nil || t.Replicas == nil {
		return config.DefaultReplicas
	}
	return *t.Replicas
}

// GetMPS is the MPS sharing set, or nil.
func (s *Sharing) GetMPS() *MPS {
	if s == nil {
		return nil
	}
	return s.MPS
}

// GetReplicas is the number of MPS clients per GPU: the value set, else 0 (no MPS).
func (m *MPS) GetReplicas() int {
	if m == nil || m.Replicas == nil {
		return 0
	}
	return *m.Replicas
}

// GetDiscovery is who sets nvidia.com/gpu.present: the value set, else the default.
func (s *Spec) GetDiscovery() string {
	if s == nil || s.Discovery == "" {
		return DefaultDiscovery
	}
	return s.Discovery
}

// GetPort is the exporter's port: the value set, else the default.
func (e *Exporter) GetPort() int {
	if e == nil || e.Port == nil {
		return DefaultExporterPort
	}
	return *e.Port
}

// Default fills every unset field with its documented default, in place, and resolves each
// node pool's device plugin settings against spec.devicePlugin, so renderers read concrete
// values only. It never touches a field the user set. "Unset" is absence (a nil pointer or
// map, an empty string), never a zero value: a number with a default is a pointer, so an
// explicit 0 stays 0 and validation reports it instead of defaulting silently.
func Default(p *GPUPolicy) {
	s := &p.Spec
	orDefault(&s.Namespace, DefaultNamespace)
	orDefault(&s.GitOps, DefaultGitOps)
	s.Discovery = s.GetDiscovery()
	orDefault(&s.Allocation, DefaultAllocation)
	orDefault(&s.PriorityClassName, DefaultPriorityClassName)
	if len(s.NodeSelector) == 0 {
		s.NodeSelector = DefaultNodeSelector()
	}
	if s.Tolerations == nil {
		s.Tolerations = DefaultTolerations()
	}

	cr := &s.ContainerRuntime
	orDefault(&cr.Name, DefaultRuntimeName)
	orDefault(&cr.Version, DefaultContainerdVersion)
	orDefault(&cr.ConfigPath, DefaultConfigPath)
	orDefault(&cr.DropInDir, DefaultDropInDir)
	orDefault(&cr.Socket, DefaultSocket)
	orDefault(&cr.RestartMode, DefaultRestartMode)

	d := &s.Driver
	orDefault(&d.Source, DefaultDriverSource)
	orDefault(&d.Enforce, DefaultDriverEnforce)
	orDefault(&d.Image, DefaultDriverImage)
	orDefault(&d.OS, DefaultDriverOS)
	orDefault(&d.OnDrift, DefaultDriverOnDrift)
	orDefault(&d.KernelModuleType, DefaultKernelModuleType)
	defaultUpgrade(d)

	t := &s.Toolkit
	orDefault(&t.Source, DefaultToolkitSource)
	orDefault(&t.Version, DefaultToolkitVersion)
	orDefault(&t.Image, DefaultToolkitImage)
	orDefault(&t.RuntimeClassName, DefaultRuntimeClassName)
	boolDefault(&t.SetAsDefault, false)
	boolDefault(&t.CDI, true)
	defaultRollout(&t.Resources, &t.UpdateStrategy, DefaultResources("20m", "64Mi", "256Mi"))

	defaultDevicePlugin(&s.DevicePlugin, DevicePlugin{
		ResourceName:       config.DefaultResourceName,
		MIGStrategy:        config.DefaultMIGStrategy,
		DeviceListStrategy: config.DefaultDeviceListStrategy,
		Sharing:            &Sharing{TimeSlicing: &TimeSlicing{Replicas: ptr(config.DefaultReplicas)}},
		HealthChecks:       &HealthChecks{Enabled: ptr(true), IgnoredXIDs: config.DefaultIgnoredXIDs()},
		Resources:          DefaultResources("20m", "64Mi", "256Mi"),
		UpdateStrategy:     DefaultUpdateStrategy(),
	})
	for i := range s.NodePools {
		np := &s.NodePools[i]
		if np.DevicePlugin == nil {
			np.DevicePlugin = &DevicePlugin{}
		}
		defaultDevicePlugin(np.DevicePlugin, s.DevicePlugin)
		orDefault(&np.Allocation, s.Allocation)
		if m := np.MIG; m != nil {
			m.Layout = m.GetLayout()
			for _, groups := range m.Layouts {
				for j := range groups {
					boolDefault(&groups[j].MIGEnabled, true)
				}
			}
		}
	}

	boolDefault(&s.FeatureDiscovery.Enabled, true)
	defaultRollout(&s.FeatureDiscovery.Resources, &s.FeatureDiscovery.UpdateStrategy, DefaultResources("10m", "32Mi", "128Mi"))

	e := &s.Exporter
	boolDefault(&e.Enabled, true)
	if e.Port == nil {
		e.Port = ptr(DefaultExporterPort)
	}
	orDefault(&e.Interval, DefaultExporterInterval)
	boolDefault(&e.ServiceMonitor, true)
	boolDefault(&e.PrometheusRule, *e.ServiceMonitor)
	boolDefault(&e.PodAttribution, true)
	defaultRollout(&e.Resources, &e.UpdateStrategy, DefaultResources("50m", "64Mi", "128Mi"))

	boolDefault(&s.Guardrails.Enabled, true)
	orDefault(&s.Images.GPUPolicy, DefaultGPUPolicyImage())
}

// defaultDevicePlugin fills dp's unset fields from base (a fully defaulted DevicePlugin).
// Nested values are copied, never shared, so a later edit of one pool cannot leak into another.
func defaultDevicePlugin(dp *DevicePlugin, base DevicePlugin) {
	orDefault(&dp.ResourceName, base.ResourceName)
	orDefault(&dp.MIGStrategy, base.MIGStrategy)
	orDefault(&dp.DeviceListStrategy, base.DeviceListStrategy)
	if dp.Sharing == nil {
		dp.Sharing = &Sharing{}
	}
	// A pool that names a way of sharing takes none from the base: time-slicing there and MPS
	// here (or the reverse) would be both, which a GPU cannot do.
	ownTimeSlicing := dp.Sharing.TimeSlicing != nil && dp.Sharing.TimeSlicing.Replicas != nil
	ownMPS := dp.Sharing.MPS != nil
	if dp.Sharing.TimeSlicing == nil {
		dp.Sharing.TimeSlicing = &TimeSlicing{}
	}
	if dp.Sharing.TimeSlicing.Replicas == nil {
		replicas := base.Sharing.TimeSlicing.GetReplicas()
		if ownMPS {
			replicas = config.DefaultReplicas
		}
		dp.Sharing.TimeSlicing.Replicas = ptr(replicas)
	}
	if m := base.Sharing.GetMPS(); !ownMPS && !ownTimeSlicing && m != nil {
		dp.Sharing.MPS = &MPS{Replicas: ptr(m.GetReplicas())}
	}
	if dp.HealthChecks == nil {
		dp.HealthChecks = &HealthChecks{}
	}
	boolDefault(&dp.HealthChecks.Enabled, Bool(base.HealthChecks.Enabled))
	if dp.HealthChecks.IgnoredXIDs == nil {
		dp.HealthChecks.IgnoredXIDs = slices.Clone(base.HealthChecks.IgnoredXIDs)
	}
	if dp.Resources == nil && base.Resources != nil {
		dp.Resources = base.Resources.DeepCopy()
	}
	if dp.UpdateStrategy == nil {
		dp.UpdateStrategy = &UpdateStrategy{}
	}
	if dp.UpdateStrategy.MaxUnavailable == nil && base.UpdateStrategy != nil && base.UpdateStrategy.MaxUnavailable != nil {
		mu := *base.UpdateStrategy.MaxUnavailable
		dp.UpdateStrategy.MaxUnavailable = &mu
	}
}

// DefaultMaxUnavailable is how many of a DaemonSet's nodes may update at once: a tenth, so a
// bad rollout stops (the DaemonSet controller waits for ready pods) before most nodes have it.
const DefaultMaxUnavailable = "10%"

// DefaultUpdateStrategy is a fresh copy of the default rolling update.
func DefaultUpdateStrategy() *UpdateStrategy {
	mu := intstr.FromString(DefaultMaxUnavailable)
	return &UpdateStrategy{MaxUnavailable: &mu}
}

// DefaultResources is a container's requests of cpu and memory with a memory limit (no cpu
// limit: throttling a node program slows its health checks, it saves nothing).
func DefaultResources(cpu, memory, memoryLimit string) *corev1.ResourceRequirements {
	return &corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(memory)},
		Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(memoryLimit)},
	}
}

// defaultRollout sets a component's resources and update strategy where unset.
func defaultRollout(res **corev1.ResourceRequirements, us **UpdateStrategy, defaults *corev1.ResourceRequirements) {
	if *res == nil {
		*res = defaults
	}
	if *us == nil {
		*us = &UpdateStrategy{}
	}
	if (*us).MaxUnavailable == nil {
		(*us).MaxUnavailable = DefaultUpdateStrategy().MaxUnavailable
	}
}

// GetMIGEnabled is whether the group switches MIG on: the value set, else true.
func (g *MIGDeviceGroup) GetMIGEnabled() bool {
	if g == nil || g.MIGEnabled == nil {
		return true
	}
	return *g.MIGEnabled
}

// GetLayout is the pool's layout: the value set, else the only declared layout, else "".
func (m *MIG) GetLayout() string {
	if m == nil {
		return ""
	}
	if m.Layout == "" && len(m.Layouts) == 1 {
		for name := range m.Layouts {
			return name
		}
	}
	return m.Layout
}

// defaultUpgrade fills spec.driver.upgrade with GPU Operator's defaults where unset.
func defaultUpgrade(d *Driver) {
	if d.Upgrade == nil {
		d.Upgrade = &DriverUpgrade{}
	}
	u := d.Upgrade
	if u.MaxUnavailable == nil {
		mu := intstr.FromString(DefaultUpgradeMaxUnavailable)
		u.MaxUnavailable = &mu
	}
	if u.Drain == nil {
		u.Drain = &DriverDrain{}
	}
	boolDefault(&u.Drain.Enabled, true)
	orDefault(&u.Drain.Timeout, DefaultDrainTimeout)
	if u.WaitForJobs == nil {
		u.WaitForJobs = &WaitForJobs{}
	}
	orDefault(&u.WaitForJobs.Timeout, DefaultWaitForJobsTimeout)
}

// PoolDriver is the driver of a node pool: spec.driver with the pool's overrides. ok is false
// when the pool overrides nothing and so runs the default driver stage.
func (s *Spec) PoolDriver(np *NodePool) (d Driver, ok bool) {
	d = s.Driver
	if np == nil || np.Driver == nil {
		return d, false
	}
	o := np.Driver
	if o.Version != "" {
		d.Version = o.Version
	}
	if o.Source != "" {
		d.Source = o.Source
	}
	if o.Image != "" {
		d.Image = o.Image
	}
	if o.Enforce != "" {
		d.Enforce = o.Enforce
	}
	if o.KernelModuleType != "" {
		d.KernelModuleType = o.KernelModuleType
	}
	return d, true
}

// DriverPools are the node pools with their own driver stage, in policy order.
func (s *Spec) DriverPools() []*NodePool {
	var out []*NodePool
	for i := range s.NodePools {
		if s.NodePools[i].Driver != nil {
			out = append(out, &s.NodePools[i])
		}
	}
	return out
}
