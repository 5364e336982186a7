package mig

import (
	"encoding/json"
	"fmt"
	"slices"
)

// ConfigVersion is mig-parted's config file version.
const ConfigVersion = "v1"

// Config is mig-parted's config file (`version: v1`, `mig-configs`), declared here because
// mig-parted is not a module this project can depend on. The function renders one per node
// pool; an existing mig-parted config carries over as the pool's layouts.
type Config struct {
	Version    string                    `json:"version"`
	MigConfigs map[string][]DeviceConfig `json:"mig-configs"`
}

// DeviceConfig is one entry of a mig-parted layout: which GPUs, MIG mode, and the MIG
// devices of each of those GPUs.
type DeviceConfig struct {
	Devices    Devices        `json:"devices"`
	MigEnabled bool           `json:"mig-enabled"`
	MigDevices map[string]int `json:"mig-devices,omitempty"`
}

// Devices is "all" or a list of GPU indexes.
type Devices struct {
	All     bool
	Indexes []int
}

// Applies reports whether the entry covers GPU index i.
func (d Devices) Applies(i int) bool { return d.All || slices.Contains(d.Indexes, i) }

// MarshalJSON writes "all" or the list of indexes.
func (d Devices) MarshalJSON() ([]byte, error) {
	if d.All {
		return []byte(`"all"`), nil
	}
	if d.Indexes == nil {
		return []byte("[]"), nil
	}
	return json.Marshal(d.Indexes)
}

// UnmarshalJSON reads "all" or a list of indexes.
func (d *Devices) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		if s != "all" {
			return fmt.Errorf("devices %q: write \"all\" or a list of GPU indexes", s)
		}
		*d = Devices{All: true}
		return nil
	}
	var idx []int
	if err := json.Unmarshal(b, &idx); err != nil {
		return fmt.Errorf("devices: write \"all\" or a list of GPU indexes: %w", err)
	}
	*d = Devices{Indexes: idx}
	return nil
}

// ForGPU returns the entry of layout that covers GPU i (the first, as mig-parted reads
// them; the function refuses overlapping entries), and whether there is one.
func ForGPU(layout []DeviceConfig, i int) (DeviceConfig, bool) {
	for _, dc := range layout {
		if dc.Devices.Applies(i) {
			return dc, true
		}
	}
	return DeviceConfig{}, false
}
