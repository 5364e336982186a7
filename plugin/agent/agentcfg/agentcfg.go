// Package agentcfg loads and checks the node agent's configuration (config.Agent), the
// document the function renders into ConfigMap gpu-node-agent.
package agentcfg

import (
	"fmt"
	"os"
	"slices"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// DefaultPath is where the DaemonSets mount the agent config.
const DefaultPath = config.AgentConfigDir + "/" + config.AgentConfigFile

// DefaultInterval applies when the config leaves interval empty.
const DefaultInterval = 30 * time.Second

// Load reads path strictly: an unknown field is an error, not a silently ignored setting.
func Load(path string) (*config.Agent, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("agent config: %w (mount ConfigMap %s key %s, or pass --config)", err, config.AgentConfigMap, config.AgentConfigFile)
	}
	var cfg config.Agent
	if err := yaml.UnmarshalStrict(b, &cfg); err != nil {
		return nil, fmt.Errorf("agent config %s: %w (re-render it with gpupolicy-fn; do not edit by hand)", path, err)
	}
	if err := Validate(&cfg); err != nil {
		return nil, fmt.Errorf("agent config %s: %w", path, err)
	}
	return &cfg, nil
}

// Validate checks the fields the agent acts on, naming each bad field.
func Validate(cfg *config.Agent) error {
	if _, err := Interval(cfg); err != nil {
		return err
	}
	if cfg.Driver.Version == "" {
		return fmt.Errorf("driver.version is empty (spec.driver.version of the policy)")
	}
	if !slices.Contains([]string{"", "exact", "branch", "none"}, cfg.Driver.Enforce) {
		return fmt.Errorf("driver.enforce %q is not exact|branch|none", cfg.Driver.Enforce)
	}
	if cfg.Toolkit.RuntimeClassName == "" {
		return fmt.Errorf("toolkit.runtimeClassName is empty (spec.toolkit.runtimeClassName)")
	}
	if len(cfg.Toolkit.DropInSHA256) != 64 {
		return fmt.Errorf("toolkit.dropInSHA256 %q is not a sha256 hex digest of the rendered drop-in", cfg.Toolkit.DropInSHA256)
	}
	return nil
}

// Interval is cfg.Interval parsed (DefaultInterval when empty).
func Interval(cfg *config.Agent) (time.Duration, error) {
	if cfg.Interval == "" {
		return DefaultInterval, nil
	}
	d, err := time.ParseDuration(cfg.Interval)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("interval %q is not a positive Go duration (e.g. 30s)", cfg.Interval)
	}
	return d, nil
}
