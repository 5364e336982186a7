package devices

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// Device is one device id the plugin advertises to the kubelet.
type Device struct {
	ID   string // the kubelet's id: the UUID, or "<uuid>::<n>" for replica n (time-slicing or MPS)
	UUID string // the GPU or MIG device the id stands for
	GPU  int    // index of the physical GPU (the parent of a MIG device)
	NUMA int    // -1 when unknown
}

// Resource is one extended resource with its devices, served on its own socket.
type Resource struct {
	Name    string
	MIG     bool // devices are MIG devices
	Devices []Device
}

// Replica separates a UUID from the replica number in a time-sliced device id.
const Replica = "::"

// UUIDOf returns the UUID a device id stands for ("GPU-x::3" -> "GPU-x").
func UUIDOf(id string) string {
	uuid, _, _ := strings.Cut(id, Replica)
	return uuid
}

// Resources groups the GPUs into resources under cfg's MIG strategy and replicas:
//   - none: every GPU is one device of cfg.ResourceName, MIG mode or not.
//   - single: every GPU must be in MIG mode with MIG devices of one profile, which are then
//     the devices of cfg.ResourceName; a node with no GPU in MIG mode advertises whole GPUs.
//   - mixed: GPUs outside MIG mode are devices of cfg.ResourceName; MIG devices are devices of
//     "<domain>/mig-<profile>" (nvidia.com/mig-1g.5gb).
//
// cfg.ResourceName is always among the result, without devices if need be. The result is
// sorted by resource name; devices by GPU index, then MIG instance, then replica.
func Resources(gpus []GPU, cfg config.DevicePlugin) ([]Resource, error) {
	_, replicas := cfg.Sharing.Strategy() // time-slicing and MPS replicas are advertised alike
	byName := map[string]*Resource{}
	add := func(name string, mig bool, uuid string, g GPU) {
		r := byName[name]
		if r == nil {
			r = &Resource{Name: name, MIG: mig}
			byName[name] = r
		}
		for n := range replicas {
			id := uuid
			if replicas > 1 {
				id = uuid + Replica + strconv.Itoa(n)
			}
			r.Devices = append(r.Devices, Device{ID: id, UUID: uuid, GPU: g.Index, NUMA: g.NUMA})
		}
	}
	switch cfg.MIGStrategy {
	case "", config.MIGNone:
		for _, g := range gpus {
			add(cfg.ResourceName, false, g.UUID, g)
		}
	case config.MIGSingle:
		if err := checkSingle(gpus); err != nil {
			return nil, err
		}
		for _, g := range gpus {
			if !g.MIGEnabled {
				add(cfg.ResourceName, false, g.UUID, g)
				continue
			}
			for _, m := range g.MIG {
				add(cfg.ResourceName, true, m.UUID, g)
			}
		}
	case config.MIGMixed:
		domain, _, _ := strings.Cut(cfg.ResourceName, "/")
		for _, g := range gpus {
			if !g.MIGEnabled {
				add(cfg.ResourceName, false, g.UUID, g)
				continue
			}
			for _, m := range g.MIG {
				add(domain+"/mig-"+m.Profile, true, m.UUID, g)
			}
		}
	default:
		return nil, fmt.Errorf("migStrategy %q: want none, single or mixed", cfg.MIGStrategy)
	}
	// The main resource is always served, if empty: a node without whole GPUs (none found, or
	// all partitioned under mixed) then reports a capacity of 0 instead of a stale one.
	if byName[cfg.ResourceName] == nil {
		byName[cfg.ResourceName] = &Resource{Name: cfg.ResourceName}
	}
	names := slices.Sorted(maps.Keys(byName))
	out := make([]Resource, 0, len(names))
	for _, n := range names {
		out = append(out, *byName[n])
	}
	return out, nil
}

// checkSingle explains why a node's MIG layout cannot be advertised under migStrategy single.
func checkSingle(gpus []GPU) error {
	var enabled, disabled []string
	profiles := map[string][]string{}
	for _, g := range gpus {
		name := fmt.Sprintf("GPU %d (%s)", g.Index, g.UUID)
		if !g.MIGEnabled {
			disabled = append(disabled, name)
			continue
		}
		enabled = append(enabled, name)
		if len(g.MIG) == 0 {
			return fmt.Errorf("migStrategy single: %s is in MIG mode but has no MIG devices; create them (nvidia-smi mig -cgi ... -C) or disable MIG on it", name)
		}
		for _, m := range g.MIG {
			profiles[m.Profile] = appendOnce(profiles[m.Profile], name)
		}
	}
	if len(enabled) > 0 && len(disabled) > 0 {
		return fmt.Errorf("migStrategy single needs MIG on every GPU or on none: enabled on %s, disabled on %s; use migStrategy mixed or make the GPUs alike",
			strings.Join(enabled, ", "), strings.Join(disabled, ", "))
	}
	if len(profiles) > 1 {
		parts := make([]string, 0, len(profiles))
		for p, on := range profiles {
			parts = append(parts, p+" on "+strings.Join(on, ", "))
		}
		sort.Strings(parts)
		return fmt.Errorf("migStrategy single needs one MIG profile on the node, found %s; use migStrategy mixed or repartition", strings.Join(parts, "; "))
	}
	return nil
}

func appendOnce(list []string, s string) []string {
	if len(list) > 0 && list[len(list)-1] == s {
		return list
	}
	return append(list, s)
}
