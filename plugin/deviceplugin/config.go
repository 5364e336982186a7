package deviceplugin

import (
	"fmt"
	"os"
	"regexp"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/deviceplugin/health"
	"github.com/gpupolicy/gpupolicy/plugin/deviceplugin/server"
)

// DefaultConfig is what the plugin runs with when --config is not given: the GPUPolicy
// defaults of spec.devicePlugin.
func DefaultConfig() config.DevicePlugin {
	return config.DevicePlugin{
		ResourceName:       "nvidia.com/gpu",
		MIGStrategy:        "none",
		DeviceListStrategy: server.StrategyCDICRI,
		Sharing:            config.Sharing{TimeSlicing: config.TimeSlicing{Replicas: 1}},
		HealthChecks:       config.HealthChecks{Enabled: true, IgnoredXIDs: []uint64{13, 31, 43, 45, 68, 109}},
	}
}

// LoadConfig reads a rendered device plugin config (YAML, strict: unknown fields are errors)
// over the defaults and validates it. Errors name the file and the field.
func LoadConfig(path string) (config.DevicePlugin, error) {
	cfg := DefaultConfig()
	b, err := os.ReadFile(path)
	if err != nil {
		return cfg, fmt.Errorf("device plugin config: %w", err)
	}
	if err := yaml.UnmarshalStrict(b, &cfg); err != nil {
		return cfg, fmt.Errorf("device plugin config %s: %w (the file is rendered by gpupolicy-fn into ConfigMap %s; re-render it)", path, err, config.DevicePluginConfigMap)
	}
	if err := ValidateConfig(cfg); err != nil {
		return cfg, fmt.Errorf("device plugin config %s: %w", path, err)
	}
	return cfg, nil
}

// resourceNameRE is a Kubernetes extended resource name: a domain, "/", a name.
var resourceNameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)

// ValidateConfig checks every field the plugin acts on.
func ValidateConfig(cfg config.DevicePlugin) error {
	if !resourceNameRE.MatchString(cfg.ResourceName) {
		return fmt.Errorf("field resourceName: %q is not an extended resource name like nvidia.com/gpu", cfg.ResourceName)
	}
	switch cfg.MIGStrategy {
	case "none", "single", "mixed":
	default:
		return fmt.Errorf("field migStrategy: %q: want none, single or mixed", cfg.MIGStrategy)
	}
	switch cfg.DeviceListStrategy {
	case server.StrategyCDICRI, server.StrategyEnvVar:
	default:
		return fmt.Errorf("field deviceListStrategy: %q: want %s or %s", cfg.DeviceListStrategy, server.StrategyCDICRI, server.StrategyEnvVar)
	}
	if r := cfg.Sharing.TimeSlicing.Replicas; r < 1 {
		return fmt.Errorf("field sharing.timeSlicing.replicas: %d: want 1 (no sharing) or more", r)
	}
	if _, err := RecoveryPeriod(cfg); err != nil {
		return err
	}
	return nil
}

// RecoveryPeriod is healthChecks.recoveryPeriod, or the default when empty.
func RecoveryPeriod(cfg config.DevicePlugin) (time.Duration, error) {
	s := cfg.HealthChecks.RecoveryPeriod
	if s == "" {
		return health.DefaultRecoveryPeriod, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("field healthChecks.recoveryPeriod: %q: want a positive Go duration such as 2m", s)
	}
	return d, nil
}
