package labels

import (
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/gpulib"
)

// migProfile is one MIG device's shape.
type migProfile struct {
	name string
	attr nvml.DeviceAttributes
}

// migInventory lists, per GPU, whether MIG is enabled and its MIG devices.
func migInventory(lib nvml.Interface, count int) (enabled []bool, devices [][]migProfile, err error) {
	enabled, devices = make([]bool, count), make([][]migProfile, count)
	for i := range count {
		dev, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, nil, nvmlError(fmt.Sprintf("DeviceGetHandleByIndex(%d)", i), ret)
		}
		mode, _, ret := dev.GetMigMode()
		if ret == nvml.ERROR_NOT_SUPPORTED {
			continue
		}
		if ret != nvml.SUCCESS {
			return nil, nil, nvmlError("DeviceGetMigMode", ret)
		}
		if mode != nvml.DEVICE_MIG_ENABLE {
			continue
		}
		enabled[i] = true
		slots, ret := dev.GetMaxMigDeviceCount()
		if ret != nvml.SUCCESS {
			return nil, nil, nvmlError("DeviceGetMaxMigDeviceCount", ret)
		}
		for s := range slots {
			mig, ret := dev.GetMigDeviceHandleByIndex(s)
			if ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT {
				continue // an empty slot
			}
			if ret != nvml.SUCCESS {
				return nil, nil, nvmlError("DeviceGetMigDeviceHandleByIndex", ret)
			}
			attr, ret := mig.GetAttributes()
			if ret != nvml.SUCCESS {
				return nil, nil, nvmlError("DeviceGetAttributes", ret)
			}
			devices[i] = append(devices[i], migProfile{name: gpulib.MIGProfileName(attr), attr: attr})
		}
	}
	return enabled, devices, nil
}

// shapeLabels are the per-profile labels under prefix ("nvidia.com/gpu" for single,
// "nvidia.com/mig-<profile>" for mixed).
func shapeLabels(out map[string]string, prefix string, a nvml.DeviceAttributes) {
	u := func(v uint32) string { return strconv.FormatUint(uint64(v), 10) }
	out[prefix+".memory"] = strconv.FormatUint(a.MemorySizeMB, 10)
	out[prefix+".multiprocessors"] = u(a.MultiprocessorCount)
	out[prefix+".slices.gi"] = u(a.GpuInstanceSliceCount)
	out[prefix+".slices.ci"] = u(a.ComputeInstanceSliceCount)
	out[prefix+".engines.copy"] = u(a.SharedCopyEngineCount)
	out[prefix+".engines.decoder"] = u(a.SharedDecoderCount)
	out[prefix+".engines.encoder"] = u(a.SharedEncoderCount)
	out[prefix+".engines.jpeg"] = u(a.SharedJpegCount)
	out[prefix+".engines.ofa"] = u(a.SharedOfaCount)
}

// migLabels adds the labels of the MIG strategy. single: the node advertises its MIG devices
// as nvidia.com/gpu, so the product, count and memory labels describe them (every GPU must
// have MIG on with one profile, else the product says MIG-INVALID and the count is 0, as
// gpu-feature-discovery does). mixed: one label group per profile.
func migLabels(lib nvml.Interface, count int, strategy string, out map[string]string) error {
	if strategy == config.MIGNone || count == 0 {
		return nil
	}
	enabled, devices, err := migInventory(lib, count)
	if err != nil {
		return err
	}
	switch strategy {
	case config.MIGSingle:
		anyMIG, names := false, map[string]nvml.DeviceAttributes{}
		total := 0
		for i := range count {
			anyMIG = anyMIG || enabled[i]
			for _, d := range devices[i] {
				names[d.name] = d.attr
			}
			total += len(devices[i])
		}
		if !anyMIG {
			return nil // no MIG on this node: the full-GPU labels stand
		}
		allOn := true
		for _, e := range enabled {
			allOn = allOn && e
		}
		if !allOn || len(names) != 1 {
			out[Product] += "-MIG-INVALID"
			out[Count] = "0"
			return nil
		}
		for name, attr := range names {
			out[Product] += "-MIG-" + name
			out[Count] = strconv.Itoa(total)
			shapeLabels(out, config.LabelGPUShapePrefix, attr)
		}
	case config.MIGMixed:
		counts, attrs := map[string]int{}, map[string]nvml.DeviceAttributes{}
		for i := range count {
			for _, d := range devices[i] {
				counts[d.name]++
				attrs[d.name] = d.attr
			}
		}
		for _, n := range slices.Sorted(maps.Keys(counts)) {
			prefix := config.LabelMIGProfilePrefix + n
			out[prefix+".count"] = strconv.Itoa(counts[n])
			shapeLabels(out, prefix, attrs[n])
		}
	default:
		return fmt.Errorf("devicePlugin.migStrategy %q is not none|single|mixed", strategy)
	}
	return nil
}

// owned reports whether key is a feature label this package writes, so a label it no
// longer computes (a MIG profile that was removed) can be deleted without touching the
// gates, the driver labels or anything a person set.
func owned(key string) bool { return config.IsFeatureLabel(key) }

// WithRemovals returns computed plus "" (remove) for every owned label the node carries
// that computed no longer has.
func WithRemovals(nodeLabels, computed map[string]string) map[string]string {
	out := make(map[string]string, len(computed))
	for k, v := range computed {
		out[k] = v
	}
	for k := range nodeLabels {
		if _, ok := computed[k]; !ok && owned(k) {
			out[k] = ""
		}
	}
	return out
}
