package config

import (
	"fmt"
	"os"
	"slices"
	"time"

	"sigs.k8s.io/yaml"
)

// AgentConfigPath is where the DaemonSets mount the agent config.
const AgentConfigPath = AgentConfigDir + "/" + AgentConfigFile

// DefaultAgentInterval is how often `gpu-node-agent gate` re-validates every stage: short
// enough that a broken driver closes the downstream gates within a minute, long enough to cost
// nothing. The function renders it into the agent config; the agent applies it when the
// config leaves interval empty.
const DefaultAgentInterval = 30 * time.Second

// LoadAgent reads the agent config at path strictly: an unknown field is an error, not a
// silently ignored setting.
func LoadAgent(path string) (*Agent, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("agent config: %w (mount ConfigMap %s key %s, or pass --config)", err, AgentConfigMap, AgentConfigFile)
	}
	var cfg Agent
	if err := yaml.UnmarshalStrict(b, &cfg); err != nil {
		return nil, fmt.Errorf("agent config %s: %w (re-render it with gpupolicy-fn; do not edit by hand)", path, err)
	}
	if err := ValidateAgent(&cfg); err != nil {
		return nil, fmt.Errorf("agent config %s: %w", path, err)
	}
	return &cfg, nil
}

// ValidateAgent checks the fields the agent acts on, naming each bad field.
func ValidateAgent(cfg *Agent) error {
	if _, err := AgentInterval(cfg); err != nil {
		return err
	}
	if cfg.Driver.Version == "" {
		return fmt.Errorf("driver.version is empty (spec.driver.version of the policy)")
	}
	if _, err := CheckDriverVersion(cfg.Driver.Version); err != nil {
		return fmt.Errorf("driver.version: %w (spec.driver.version of the policy)", err)
	}
	if !slices.Contains([]string{"", DriverEnforceExact, DriverEnforceBranch, DriverEnforceNone}, cfg.Driver.Enforce) {
		return fmt.Errorf("driver.enforce %q is not exact|branch|none", cfg.Driver.Enforce)
	}
	if cfg.Toolkit.RuntimeClassName == "" {
		return fmt.Errorf("toolkit.runtimeClassName is empty (spec.toolkit.runtimeClassName)")
	}
	if IsNodeRuntime(cfg.Toolkit.RuntimeClassName) {
		return NodeRuntimeError("toolkit.runtimeClassName", cfg.Toolkit.RuntimeClassName)
	}
	if err := CheckContainerdMinor("containerRuntime.version", cfg.ContainerRuntime.Version); err != nil {
		return fmt.Errorf("%w (spec.containerRuntime.version of the policy)", err)
	}
	if err := checkReplicas("devicePlugin", cfg.DevicePlugin); err != nil {
		return err
	}
	if err := checkOnDrift("driver.onDrift", cfg.Driver.OnDrift); err != nil {
		return err
	}
	for i, p := range cfg.NodePools {
		if d := p.Driver; d != nil {
			f := fmt.Sprintf("nodePools[%d] (%s).driver", i, p.Name)
			if _, err := CheckDriverVersion(d.Version); err != nil {
				return fmt.Errorf("%s.version: %w (spec.nodePools[%d].driver.version of the policy)", f, err, i)
			}
			if !slices.Contains([]string{"", DriverEnforceExact, DriverEnforceBranch, DriverEnforceNone}, d.Enforce) {
				return fmt.Errorf("%s.enforce %q is not exact|branch|none", f, d.Enforce)
			}
		}
		if err := checkReplicas(fmt.Sprintf("nodePools[%d] (%s).devicePlugin", i, p.Name), p.DevicePlugin); err != nil {
			return err
		}
	}
	if err := cfg.Upgrade.validate(); err != nil {
		return err
	}
	if len(cfg.Toolkit.DropInSHA256) != 64 {
		return fmt.Errorf("toolkit.dropInSHA256 %q is not a sha256 hex digest of the rendered drop-in", cfg.Toolkit.DropInSHA256)
	}
	return nil
}

// checkReplicas refuses replicas over MaxReplicas (the agent labels the node's capacity by
// them; the device plugin refuses them as well) and MPS together with time-slicing.
func checkReplicas(field string, dp DevicePlugin) error {
	if r := dp.Sharing.TimeSlicing.Replicas; r > MaxReplicas {
		return fmt.Errorf("%s.sharing.timeSlicing.replicas %d is over the limit of %d (spec.devicePlugin.sharing.timeSlicing.replicas of the policy): use at most %d and re-render", field, r, MaxReplicas, MaxReplicas)
	}
	if m := dp.Sharing.MPS; m != nil {
		if m.Replicas < 2 || m.Replicas > MaxMPSClients {
			return fmt.Errorf("%s.sharing.mps.replicas %d is not between 2 and %d (spec.devicePlugin.sharing.mps.replicas of the policy): re-render", field, m.Replicas, MaxMPSClients)
		}
		if dp.Sharing.TimeSlicing.Replicas > 1 {
			return fmt.Errorf("%s.sharing: mps and timeSlicing replicas %d are both set; a GPU is shared one way (spec.devicePlugin.sharing of the policy): keep one and re-render", field, dp.Sharing.TimeSlicing.Replicas)
		}
	}
	return nil
}

// AgentInterval is cfg.Interval parsed (DefaultAgentInterval when empty).
func AgentInterval(cfg *Agent) (time.Duration, error) {
	if cfg.Interval == "" {
		return DefaultAgentInterval, nil
	}
	d, err := time.ParseDuration(cfg.Interval)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("interval %q is not a positive Go duration (e.g. 30s)", cfg.Interval)
	}
	return d, nil
}

// PoolFor is which pool a node with these labels is in, as its device plugin settings: those
// of the first pool whose nodeSelector it matches (MatchesNodeSelector), else those of the
// nodes outside every pool. The function refuses pools that could both match one node, so
// "first" only decides for a config nobody rendered. The agent labels the node by it, doctor
// and the e2e fake kubelet read the node's resource by it.
func (cfg *Agent) PoolFor(nodeLabels map[string]string) DevicePlugin {
	for _, p := range cfg.NodePools {
		if MatchesNodeSelector(nodeLabels, p.NodeSelector) {
			dp := p.DevicePlugin
			if dp.Pool == "" {
				dp.Pool = p.Name
			}
			return dp
		}
	}
	return cfg.DevicePlugin
}

// MatchesNodeSelector reports whether a node with these labels carries every key of selector
// with its value, as the scheduler reads a pod's nodeSelector (a key with value "" must be
// present). An empty selector matches nothing: the function refuses a pool without a
// nodeSelector (it would take every GPU node) and pools that are not disjoint (some key with
// different values), so in a rendered config at most one pool matches a node and an empty
// selector comes only from a hand edit, where taking every node would be a guess.
func MatchesNodeSelector(nodeLabels, selector map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if got, ok := nodeLabels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

func checkOnDrift(field, v string) error {
	if !slices.Contains([]string{"", OnDriftReport, OnDriftTaint}, v) {
		return fmt.Errorf("%s %q is not report|taint (spec.driver.onDrift of the policy)", field, v)
	}
	return nil
}
