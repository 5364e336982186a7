// Package labels computes GPU feature labels with gpu-feature-discovery's names, so node
// selectors and dashboards written for NVIDIA's GPU Operator keep working without it.
package labels

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/nodefacts"
)

// Label keys (gpu-feature-discovery's); the list is the node contract's (plugin/config), so the
// function knows which labels the stack writes.
const (
	Product             = config.LabelGPUProduct
	Memory              = config.LabelGPUMemory
	Count               = config.LabelGPUCount
	Family              = config.LabelGPUFamily
	ComputeMajor        = config.LabelGPUComputeMajor
	ComputeMinor        = config.LabelGPUComputeMinor
	DriverVersionFull   = config.LabelCUDADriverFull
	DriverVersionMajor  = config.LabelCUDADriverMajor
	DriverVersionMinor  = config.LabelCUDADriverMinor
	DriverVersionRev    = config.LabelCUDADriverRev
	RuntimeVersionFull  = config.LabelCUDARuntimeFull
	RuntimeVersionMajor = config.LabelCUDARuntimeMajor
	RuntimeVersionMinor = config.LabelCUDARuntimeMinor
	LegacyDriverMajor   = config.LabelLegacyDriverMajor
	LegacyDriverMinor   = config.LabelLegacyDriverMinor
	LegacyDriverRev     = config.LabelLegacyDriverRev
	LegacyRuntimeMajor  = config.LabelLegacyRuntimeMajor
	LegacyRuntimeMinor  = config.LabelLegacyRuntimeMinor
	MIGCapable          = config.LabelMIGCapable
	MIGStrategy         = config.LabelMIGStrategy
	Replicas            = config.LabelGPUReplicas
	SharingStrategy     = config.LabelGPUSharingStrategy
	Machine             = config.LabelGPUMachine
	Mode                = config.LabelGPUMode
	MPSCapable          = config.LabelMPSCapable
)

const (
	unknownFamily        = "undefined"
	migNotSupportedValue = "false"
	sharedSuffix         = "-SHARED"
)

// nvmlError names the failing call so a broken GPU or driver is diagnosable from the log.
func nvmlError(call string, ret nvml.Return) error {
	return fmt.Errorf("nvml %s: %s", call, nvml.ErrorString(ret))
}

// Family maps a CUDA compute capability to gpu-feature-discovery's architecture family.
func family(major, minor int) string {
	switch major {
	case 3:
		return "kepler"
	case 5:
		return "maxwell"
	case 6:
		return "pascal"
	case 7:
		if minor < 5 {
			return "volta"
		}
		return "turing"
	case 8:
		if minor < 9 {
			return "ampere"
		}
		return "ada-lovelace"
	case 9:
		return "hopper"
	case 10, 12:
		return "blackwell"
	}
	return unknownFamily
}

// FromNVML computes the labels for a node with the given device plugin settings, reading the
// facts NVML lacks (machine, PCI class, vGPU) from sysfs (DefaultSysfs in the container). GPU
// labels describe device 0, as gpu-feature-discovery's do (nodes are homogeneous in practice).
func FromNVML(lib nvml.Interface, dp config.DevicePlugin, sysfs string) (map[string]string, error) {
	out := map[string]string{}
	count, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, nvmlError("DeviceGetCount", ret)
	}
	if count == 0 {
		// Like gpu-feature-discovery: a node without a GPU gets no GPU, driver or sharing
		// labels (those it had are removed); only the vGPU one.
		vgpuLabels(lib, 0, sysfs, out)
		return out, nil
	}
	out[Count] = strconv.Itoa(count)

	d, failed := nodefacts.ReadDriver(lib)
	for _, f := range failed {
		if f.Call != nodefacts.CallNVMLVersion { // the labels do not name NVML's own version
			return nil, f
		}
	}
	parts := append(strings.SplitN(d.Version, ".", 3), "", "")
	out[DriverVersionFull], out[DriverVersionMajor], out[DriverVersionMinor], out[DriverVersionRev] = d.Version, parts[0], parts[1], parts[2]
	out[LegacyDriverMajor], out[LegacyDriverMinor], out[LegacyDriverRev] = parts[0], parts[1], parts[2]
	cmaj, cmin, _ := strings.Cut(d.CUDAVersion, ".")
	out[RuntimeVersionFull], out[RuntimeVersionMajor], out[RuntimeVersionMinor] = d.CUDAVersion, cmaj, cmin
	out[LegacyRuntimeMajor], out[LegacyRuntimeMinor] = cmaj, cmin

	if err := deviceLabels(lib, out); err != nil {
		return nil, err
	}
	out[Machine] = machine(sysfs)
	out[Mode] = gpuMode(lib, count, sysfs)
	vgpuLabels(lib, count, sysfs, out)

	if err := resourceLabels(lib, count, dp, out); err != nil {
		return nil, err
	}
	return out, nil
}

func deviceLabels(lib nvml.Interface, out map[string]string) error {
	dev, ret := lib.DeviceGetHandleByIndex(0)
	if ret != nvml.SUCCESS {
		return nvmlError("DeviceGetHandleByIndex(0)", ret)
	}
	name, ret := dev.GetName()
	if ret != nvml.SUCCESS {
		return nvmlError("DeviceGetName", ret)
	}
	out[Product] = config.ProductLabel(name)
	mem, ret := dev.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return nvmlError("DeviceGetMemoryInfo", ret)
	}
	out[Memory] = strconv.FormatUint(mem.Total/(1024*1024), 10)
	major, minor, ret := dev.GetCudaComputeCapability()
	if ret != nvml.SUCCESS {
		return nvmlError("DeviceGetCudaComputeCapability", ret)
	}
	out[ComputeMajor], out[ComputeMinor] = strconv.Itoa(major), strconv.Itoa(minor)
	out[Family] = family(major, minor)
	_, _, ret = dev.GetMigMode()
	switch ret {
	case nvml.SUCCESS:
		out[MIGCapable] = "true"
	case nvml.ERROR_NOT_SUPPORTED:
		out[MIGCapable] = migNotSupportedValue
	default:
		return nvmlError("DeviceGetMigMode", ret)
	}
	return nil
}
