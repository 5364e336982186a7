package doctor

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// agentDaemonSet is the DaemonSet whose nodeSelector is the policy's entry gate.
const agentDaemonSet = "gpu-node-agent"

// Expectations are the facts of the policy that a diagnosis needs: which resource a GPU pod asks
// for, which RuntimeClass it names, which driver the nodes must run and which stages exist.
type Expectations struct {
	// Source says where these facts came from: "policy <path>", "configmap <ns>/<name>" or "defaults".
	Source           string            `json:"source"`
	Namespace        string            `json:"namespace"`
	ResourceName     string            `json:"resourceName"`
	RuntimeClassName string            `json:"runtimeClassName"`
	EntrySelector    map[string]string `json:"entrySelector"`
	// DRA: the GPU nodes outside every pool are served by the DRA plugin (allocation: dra).
	DRA bool `json:"dra,omitempty"`
	// Pools whose device plugin advertises another resource name than ResourceName, or whose
	// allocation differs from DRA.
	Pools         []PoolExpectation `json:"pools,omitempty"`
	DriverVersion string            `json:"driverVersion,omitempty"`
	DriverEnforce string            `json:"driverEnforce,omitempty"`
	// DriverKernelModules is the flavour the policy's driver asks for (open | proprietary;
	// "" accepts either).
	DriverKernelModules string `json:"driverKernelModules,omitempty"`
	FeatureDiscovery    bool   `json:"featureDiscovery"`
	Exporter            bool   `json:"exporter"`
	// MIG are the node pools with MIG layouts.
	MIG []MIGPoolExpectation `json:"mig,omitempty"`
	// MPS: some device plugin shares GPUs with MPS, so the MPS control daemon's check runs
	// between the MIG step and the device plugin's gate.
	MPS bool `json:"mps,omitempty"`
	// PoolDrivers are the node pools with their own driver (spec.nodePools[].driver).
	PoolDrivers []PoolDriverExpectation `json:"poolDrivers,omitempty"`
}

// PoolDriverExpectation is the driver of a node pool that overrides spec.driver.
type PoolDriverExpectation struct {
	Pool          string            `json:"pool"`
	NodeSelector  map[string]string `json:"nodeSelector"`
	Version       string            `json:"version"`
	Enforce       string            `json:"enforce"`
	KernelModules string            `json:"kernelModules,omitempty"`
}

// poolDriver is the driver a node with these labels must run: its pool's own, else the
// policy's (the agent's rule, config.Agent.DriverFor).
func (e Expectations) poolDriver(labels map[string]string) PoolDriverExpectation {
	for _, p := range e.PoolDrivers {
		if config.MatchesNodeSelector(labels, p.NodeSelector) {
			return p
		}
	}
	return PoolDriverExpectation{Version: e.DriverVersion, Enforce: e.DriverEnforce, KernelModules: e.DriverKernelModules}
}

// modulesFor is the kernel module flavour a node with these labels must load ("" for either).
func (e Expectations) modulesFor(labels map[string]string) string {
	return e.poolDriver(labels).KernelModules
}

// driverFor is the driver version and enforce rule a node with these labels must satisfy.
func (e Expectations) driverFor(labels map[string]string) (version, enforce string) {
	d := e.poolDriver(labels)
	return d.Version, d.Enforce
}

// PoolExpectation is a node pool with its own device plugin resource name.
type PoolExpectation struct {
	Name         string            `json:"name"`
	NodeSelector map[string]string `json:"nodeSelector"`
	ResourceName string            `json:"resourceName"`
	DRA          bool              `json:"dra,omitempty"`
}

// resourceFor is the resource the device plugin advertises on a node with these labels: its
// pool's, else the policy's, by the agent's rule of which pool a node is in
// (config.Agent.PoolFor).
func (e Expectations) resourceFor(labels map[string]string) string {
	for _, p := range e.Pools {
		if config.MatchesNodeSelector(labels, p.NodeSelector) {
			return p.ResourceName
		}
	}
	return e.ResourceName
}

// draFor reports whether the DRA plugin serves a node with these labels, by the same rule.
func (e Expectations) draFor(labels map[string]string) bool {
	for _, p := range e.Pools {
		if config.MatchesNodeSelector(labels, p.NodeSelector) {
			return p.DRA
		}
	}
	return e.DRA
}

// anyDRA reports whether some node group is on DRA.
func (e Expectations) anyDRA() bool {
	return e.DRA || slices.ContainsFunc(e.Pools, func(p PoolExpectation) bool { return p.DRA })
}

// resourceNames are every GPU resource name of the policy, the default first.
func (e Expectations) resourceNames() []string {
	names := []string{e.ResourceName}
	for _, p := range e.Pools {
		if !slices.Contains(names, p.ResourceName) {
			names = append(names, p.ResourceName)
		}
	}
	return names
}

// stages are the optional stages e enables, as the gate table (config.Gates) reads them.
func (e Expectations) stages() config.Stages {
	return config.Stages{FeatureDiscovery: e.FeatureDiscovery, Exporter: e.Exporter, MIG: len(e.MIG) > 0, MPS: e.MPS}
}

// defaultExpectations are the contract's defaults, used when neither -f nor the agent's
// ConfigMap in the cluster says otherwise.
func defaultExpectations(namespace string) Expectations {
	return Expectations{
		Source:           "defaults",
		Namespace:        cmp.Or(namespace, v1alpha1.DefaultNamespace),
		ResourceName:     config.DefaultResourceName,
		RuntimeClassName: v1alpha1.DefaultRuntimeClassName,
		EntrySelector:    v1alpha1.DefaultNodeSelector(),
		FeatureDiscovery: true,
		Exporter:         true,
	}
}

// applyAgentConfig fills e from the rendered node agent configuration (the same document the
// agent on every node reads, so doctor judges nodes by the rules the agent applies).
func (e *Expectations) applyAgentConfig(raw string) error {
	var agent config.Agent
	if err := yaml.Unmarshal([]byte(raw), &agent); err != nil {
		return fmt.Errorf("key %s of ConfigMap %s: %w", config.AgentConfigFile, config.AgentConfigMap, err)
	}
	if agent.DevicePlugin.ResourceName != "" {
		e.ResourceName = agent.DevicePlugin.ResourceName
	}
	if agent.Toolkit.RuntimeClassName != "" {
		e.RuntimeClassName = agent.Toolkit.RuntimeClassName
	}
	e.DriverVersion = agent.Driver.Version
	e.DriverEnforce = agent.Driver.Enforce
	e.DriverKernelModules = agent.Driver.KernelModules
	e.DRA = agent.DevicePlugin.Allocation == config.AllocationDRA
	e.Pools = nil
	for _, p := range agent.NodePools {
		dra := p.DevicePlugin.Allocation == config.AllocationDRA
		res := cmp.Or(p.DevicePlugin.ResourceName, e.ResourceName)
		if res != e.ResourceName || dra != e.DRA {
			e.Pools = append(e.Pools, PoolExpectation{Name: p.Name, NodeSelector: p.NodeSelector, ResourceName: res, DRA: dra})
		}
	}
	e.PoolDrivers = nil
	for _, p := range agent.NodePools {
		if p.Driver != nil {
			e.PoolDrivers = append(e.PoolDrivers, PoolDriverExpectation{Pool: p.Name, NodeSelector: p.NodeSelector, Version: p.Driver.Version, Enforce: p.Driver.Enforce, KernelModules: p.Driver.KernelModules})
		}
	}
	e.FeatureDiscovery = agent.Stages.FeatureDiscovery
	e.Exporter = agent.Stages.Exporter
	e.MPS = agent.Stages.MPS
	e.applyMIGAgent(&agent)
	return nil
}

// expectationsFromObjects reads the expectations out of a rendered object set: the agent
// ConfigMap, the agent DaemonSet's nodeSelector (the entry gate) and the RuntimeClass.
func expectationsFromObjects(source string, objs []*unstructured.Unstructured) (Expectations, error) {
	e := defaultExpectations("")
	e.Source = source
	foundAgent := false
	for _, o := range objs {
		switch {
		case o.GetKind() == "ConfigMap" && o.GetName() == config.AgentConfigMap:
			raw, _, _ := unstructured.NestedString(o.Object, "data", config.AgentConfigFile)
			if err := e.applyAgentConfig(raw); err != nil {
				return e, fmt.Errorf("%s: %w", source, err)
			}
			e.Namespace = o.GetNamespace()
			foundAgent = true
		case o.GetKind() == "DaemonSet" && o.GetName() == agentDaemonSet:
			var ds struct {
				Spec struct {
					Template corev1.PodTemplateSpec `json:"template"`
				} `json:"spec"`
			}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &ds); err == nil {
				if sel := entrySelector(ds.Spec.Template.Spec); len(sel) > 0 {
					e.EntrySelector = sel
				}
			}
		}
	}
	for _, o := range objs {
		if o.GetKind() == "ConfigMap" && o.GetName() == config.MIGConfigMap {
			data, _, _ := unstructured.NestedStringMap(o.Object, "data")
			if err := e.applyMIGLayouts(data); err != nil {
				return e, fmt.Errorf("%s: %w", source, err)
			}
		}
	}
	if !foundAgent {
		return e, fmt.Errorf("%s holds no ConfigMap %s: is it the output of gpupolicy-fn render?", source, config.AgentConfigMap)
	}
	return e, nil
}

// selectorString renders a label selector map in kubectl's syntax, keys sorted.
func selectorString(sel map[string]string) string {
	pairs := make([]string, 0, len(sel))
	for _, k := range slices.Sorted(maps.Keys(sel)) {
		pairs = append(pairs, k+"="+sel[k])
	}
	return strings.Join(pairs, ",")
}

// entrySelector is the agent DaemonSet's placement: its nodeSelector, or the single-valued In
// requirements of its first required node affinity term (the renderer writes the entry gate as
// affinity so node pools can add NotIn terms).
func entrySelector(spec corev1.PodSpec) map[string]string {
	if len(spec.NodeSelector) > 0 {
		return spec.NodeSelector
	}
	a := spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return nil
	}
	terms := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) == 0 {
		return nil
	}
	sel := map[string]string{}
	for _, r := range terms[0].MatchExpressions {
		if r.Operator == corev1.NodeSelectorOpIn && len(r.Values) == 1 {
			sel[r.Key] = r.Values[0]
		}
	}
	return sel
}
