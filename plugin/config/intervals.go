package config

import (
	"fmt"
	"time"
)

// Interval flag bounds of the node programs.
const (
	// MinExporterInterval and MaxExporterInterval bound gpu-exporter --interval as the
	// function bounds spec.exporter.interval (fn/api/v1alpha1, a test keeps them equal): the
	// interval is also the scrape interval, and Prometheus drops a series not scraped for 5m.
	MinExporterInterval = time.Second
	MaxExporterInterval = 150 * time.Second
	// MinProbeInterval and MaxProbeInterval bound gpu-device-plugin --probe-interval: each
	// probe asks NVML about every GPU, so a shorter one burns a core for nothing; a longer one
	// keeps advertising a GPU that stopped answering for that long (the policy renders the
	// default, 5s).
	MinProbeInterval = time.Second
	MaxProbeInterval = time.Minute
)

// CheckInterval refuses a duration flag outside [min, max], naming the flag, the bounds and
// the default.
func CheckInterval(flag string, d, min, max, def time.Duration) error {
	if d < min || d > max {
		return fmt.Errorf("--%s %s is out of range: use %s to %s (default %s)", flag, d, min, max, def)
	}
	return nil
}
