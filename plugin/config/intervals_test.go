package config_test

import (
	"testing"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// gpu-exporter --interval takes what the function takes as spec.exporter.interval.
func TestExporterIntervalBoundsMatchTheFunction(t *testing.T) {
	if config.MinExporterInterval != v1alpha1.MinExporterInterval || config.MaxExporterInterval != v1alpha1.MaxExporterInterval {
		t.Fatalf("plugin/config exporter interval bounds %s..%s, fn/api/v1alpha1 %s..%s: keep them equal",
			config.MinExporterInterval, config.MaxExporterInterval, v1alpha1.MinExporterInterval, v1alpha1.MaxExporterInterval)
	}
}
