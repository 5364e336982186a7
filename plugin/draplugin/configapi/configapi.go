// Package configapi declares the opaque device configuration of NVIDIA's DRA driver,
// API group resource.nvidia.com/v1beta1, as NVIDIA's k8s-dra-driver-gpu v25.8 publishes it
// (api/nvidia.com/resource/v1beta1: gpuconfig.go, migconfig.go, sharing.go, validate.go). The
// driver's module is not served by the module proxy, so the types are declared here with the
// same kinds, field names, enums, defaults (Normalize) and checks (Validate), with the feature
// gates TimeSlicingSettings and MPSSupport on: a ResourceClaim or DeviceClass written for
// NVIDIA's driver carries the same JSON to gpupolicy's.
package configapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"k8s.io/apimachinery/pkg/api/resource"
)

// The API group, version and kinds.
const (
	GroupName           = "resource.nvidia.com"
	Version             = "v1beta1"
	APIVersion          = GroupName + "/" + Version
	GpuConfigKind       = "GpuConfig"
	MigDeviceConfigKind = "MigDeviceConfig"
)

// Sharing strategies and time-slice intervals, NVIDIA's names.
const (
	TimeSlicingStrategy = "TimeSlicing"
	MpsStrategy         = "MPS"
	FabricStrategy      = "Fabric"

	DefaultTimeSlice TimeSliceInterval = "Default"
	ShortTimeSlice   TimeSliceInterval = "Short"
	MediumTimeSlice  TimeSliceInterval = "Medium"
	LongTimeSlice    TimeSliceInterval = "Long"
)

// TypeMeta is the apiVersion and kind every config carries.
type TypeMeta struct {
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind,omitempty"`
}

// GpuConfig configures a whole GPU of a claim.
type GpuConfig struct {
	TypeMeta `json:",inline"`
	Sharing  *GpuSharing `json:"sharing,omitempty"`
}

// MigDeviceConfig configures a MIG device of a claim.
type MigDeviceConfig struct {
	TypeMeta `json:",inline"`
	Sharing  *MigDeviceSharing `json:"sharing,omitempty"`
}

// GpuSharingStrategy is TimeSlicing or MPS.
type GpuSharingStrategy string

// TimeSliceInterval is Default, Short, Medium or Long.
type TimeSliceInterval string

// GpuSharing is a GPU's sharing strategy and its settings.
type GpuSharing struct {
	Strategy          GpuSharingStrategy `json:"strategy"`
	TimeSlicingConfig *TimeSlicingConfig `json:"timeSlicingConfig,omitempty"`
	MpsConfig         *MpsConfig         `json:"mpsConfig,omitempty"`
}

// MigDeviceSharing is a MIG device's sharing strategy (time-slicing has no settings there).
type MigDeviceSharing struct {
	Strategy  GpuSharingStrategy `json:"strategy"`
	MpsConfig *MpsConfig         `json:"mpsConfig,omitempty"`
}

// TimeSlicingConfig is the CUDA time-slice of the claim's GPUs.
type TimeSlicingConfig struct {
	Interval *TimeSliceInterval `json:"interval,omitempty"`
}

// MpsConfig is what the claim's MPS control daemon gives each client.
type MpsConfig struct {
	DefaultActiveThreadPercentage *int `json:"defaultActiveThreadPercentage,omitempty"`
	// DefaultPinnedDeviceMemoryLimit applies to every device of the claim unless
	// DefaultPerDevicePinnedMemoryLimit names it (by UUID or by index within the claim).
	DefaultPinnedDeviceMemoryLimit    *resource.Quantity           `json:"defaultPinnedDeviceMemoryLimit,omitempty"`
	DefaultPerDevicePinnedMemoryLimit map[string]resource.Quantity `json:"defaultPerDevicePinnedMemoryLimit,omitempty"`
}

// Config is a decoded GpuConfig or MigDeviceConfig.
type Config interface {
	Normalize()
	Validate() error
}

// Decode reads one opaque parameter object strictly, as NVIDIA's StrictDecoder does: its
// apiVersion must be resource.nvidia.com/v1beta1, its kind GpuConfig or MigDeviceConfig, and an
// unknown field is an error. The result is normalized and validated.
func Decode(raw []byte) (Config, error) {
	var tm TypeMeta
	if err := json.Unmarshal(raw, &tm); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	if tm.APIVersion != APIVersion {
		return nil, fmt.Errorf("apiVersion %q: want %s", tm.APIVersion, APIVersion)
	}
	var cfg Config
	switch tm.Kind {
	case GpuConfigKind:
		cfg = &GpuConfig{}
	case MigDeviceConfigKind:
		cfg = &MigDeviceConfig{}
	default:
		return nil, fmt.Errorf("kind %q is not a configuration this driver applies: want %s or %s (%s)", tm.Kind, GpuConfigKind, MigDeviceConfigKind, APIVersion)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", tm.Kind, err)
	}
	cfg.Normalize()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", tm.Kind, err)
	}
	return cfg, nil
}

// DefaultGpuConfig is what a GPU gets when no config names its request: time-slicing with
// the default interval.
func DefaultGpuConfig() *GpuConfig {
	c := &GpuConfig{TypeMeta: TypeMeta{APIVersion: APIVersion, Kind: GpuConfigKind}}
	c.Normalize()
	return c
}

// DefaultMigDeviceConfig is what a MIG device gets when no config names its request.
func DefaultMigDeviceConfig() *MigDeviceConfig {
	c := &MigDeviceConfig{TypeMeta: TypeMeta{APIVersion: APIVersion, Kind: MigDeviceConfigKind}}
	c.Normalize()
	return c
}

// Normalize fills the implied defaults: time-slicing when no sharing is given, the Default
// interval, an empty MPS config.
func (c *GpuConfig) Normalize() {
	if c.Sharing == nil {
		c.Sharing = &GpuSharing{Strategy: TimeSlicingStrategy}
	}
	if c.Sharing.Strategy == TimeSlicingStrategy && c.Sharing.TimeSlicingConfig == nil {
		c.Sharing.TimeSlicingConfig = &TimeSlicingConfig{}
	}
	if t := c.Sharing.TimeSlicingConfig; t != nil && t.Interval == nil {
		i := DefaultTimeSlice
		t.Interval = &i
	}
	if c.Sharing.Strategy == MpsStrategy && c.Sharing.MpsConfig == nil {
		c.Sharing.MpsConfig = &MpsConfig{}
	}
}

// Normalize fills the implied defaults of a MIG device's config.
func (c *MigDeviceConfig) Normalize() {
	if c.Sharing == nil {
		c.Sharing = &MigDeviceSharing{Strategy: TimeSlicingStrategy}
	}
	if c.Sharing.Strategy == MpsStrategy && c.Sharing.MpsConfig == nil {
		c.Sharing.MpsConfig = &MpsConfig{}
	}
}

// Validate checks the strategy and its settings; settings of the other strategy conflict.
func (c *GpuConfig) Validate() error {
	s := c.Sharing
	if err := s.Strategy.validate(); err != nil {
		return err
	}
	switch s.Strategy {
	case TimeSlicingStrategy:
		if s.MpsConfig != nil {
			return fmt.Errorf("sharing.mpsConfig: cannot use MpsConfig with the %q strategy", TimeSlicingStrategy)
		}
		return s.TimeSlicingConfig.Interval.validate()
	default:
		if s.TimeSlicingConfig != nil {
			return fmt.Errorf("sharing.timeSlicingConfig: cannot use TimeSlicingConfig with the %q strategy", MpsStrategy)
		}
		return s.MpsConfig.validate()
	}
}

// Validate checks a MIG device's strategy and its MPS settings.
func (c *MigDeviceConfig) Validate() error {
	if err := c.Sharing.Strategy.validate(); err != nil {
		return err
	}
	if c.Sharing.Strategy == MpsStrategy {
		return c.Sharing.MpsConfig.validate()
	}
	if c.Sharing.MpsConfig != nil {
		return fmt.Errorf("sharing.mpsConfig: cannot use MpsConfig with the %q strategy", TimeSlicingStrategy)
	}
	return nil
}

func (s GpuSharingStrategy) validate() error {
	switch s {
	case TimeSlicingStrategy, MpsStrategy:
		return nil
	case FabricStrategy:
		return errors.New("sharing.strategy: the Fabric GPU sharing strategy is not enabled")
	}
	return fmt.Errorf("sharing.strategy: unknown GPU sharing strategy %q: want %s or %s", s, TimeSlicingStrategy, MpsStrategy)
}

func (t *TimeSliceInterval) validate() error {
	switch *t {
	case DefaultTimeSlice, ShortTimeSlice, MediumTimeSlice, LongTimeSlice:
		return nil
	}
	return fmt.Errorf("sharing.timeSlicingConfig.interval: unknown time-slice interval %q: want Default, Short, Medium or Long", *t)
}

func (c *MpsConfig) validate() error {
	if p := c.DefaultActiveThreadPercentage; p != nil && (*p < 0 || *p > 100) {
		return fmt.Errorf("sharing.mpsConfig.defaultActiveThreadPercentage: %d is not between 0 and 100", *p)
	}
	return nil
}

// Int is the interval as nvidia-smi compute-policy --set-timeslice takes it (0 to 3).
func (t TimeSliceInterval) Int() int {
	switch t {
	case ShortTimeSlice:
		return 1
	case MediumTimeSlice:
		return 2
	case LongTimeSlice:
		return 3
	}
	return 0
}

// PinnedMemoryLimits are the claim's per-device limits, by UUID ("<MiB>M"), as NVIDIA's
// MpsPerDevicePinnedMemoryLimit.Normalize computes them: the default for every device, then
// each per-device entry, keyed by UUID or by index within uuids. A limit under 1 MiB, or a key
// that names no device of the claim, is an error.
func (c *MpsConfig) PinnedMemoryLimits(uuids []string) (map[string]string, error) {
	out := map[string]string{}
	if d := c.DefaultPinnedDeviceMemoryLimit; d != nil {
		m, ok := megabytes(*d)
		if !ok {
			return nil, fmt.Errorf("sharing.mpsConfig.defaultPinnedDeviceMemoryLimit %s: under 1Mi", d.String())
		}
		for _, u := range uuids {
			out[u] = m
		}
	}
	for k, v := range c.DefaultPerDevicePinnedMemoryLimit {
		id := ""
		for i, u := range uuids {
			if k == u || k == strconv.Itoa(i) {
				id = u
			}
		}
		if id == "" {
			return nil, fmt.Errorf("sharing.mpsConfig.defaultPerDevicePinnedMemoryLimit[%s]: names no device of the claim (its UUIDs, or indexes 0 to %d)", k, len(uuids)-1)
		}
		m, ok := megabytes(v)
		if !ok {
			return nil, fmt.Errorf("sharing.mpsConfig.defaultPerDevicePinnedMemoryLimit[%s] %s: under 1Mi", k, v.String())
		}
		out[id] = m
	}
	return out, nil
}

func megabytes(q resource.Quantity) (string, bool) {
	v := q.Value() / 1024 / 1024
	return fmt.Sprintf("%vM", v), v > 0
}
