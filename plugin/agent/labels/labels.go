// Package labels computes GPU feature labels with gpu-feature-discovery's names, so node
// selectors and dashboards written for NVIDIA's GPU Operator keep working without it.
package labels

import (
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
	unknownFamily = "undefined"
	sharedSuffix  = "-SHARED"
)

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

// FromNVML reads the driver and the GPUs from NVML once (nodefacts) and computes the labels
// for a node with the given device plugin settings (FromSnapshot). Its error names the NVML
// call that failed.
func FromNVML(lib nvml.Interface, dp config.DevicePlugin, sysfs string) (map[string]string, error) {
	count, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, nodefacts.Failed{Call: "nvmlDeviceGetCount", Ret: ret}
	}
	var snap nodefacts.Snapshot
	if count > 0 {
		// Like gpu-feature-discovery, a node without GPUs reads no more of NVML.
		var failed []nodefacts.Failed
		snap.Driver, failed = nodefacts.ReadDriver(lib)
		for _, f := range failed {
			if f.Call != nodefacts.CallNVMLVersion { // the labels do not name NVML's own version
				return nil, f
			}
		}
		var err error
		if snap.GPUs, err = nodefacts.ReadGPUs(lib, count); err != nil {
			return nil, err
		}
	}
	return FromSnapshot(snap, dp, sysfs)
}

// FromSnapshot computes the labels of a node from one reading of its driver and GPUs, with the
// given device plugin settings, reading the facts NVML lacks (machine, PCI class, vGPU) from
// sysfs (DefaultSysfs in the container). GPU labels describe GPU 0, as gpu-feature-discovery's
// do (nodes are homogeneous in practice).
func FromSnapshot(snap nodefacts.Snapshot, dp config.DevicePlugin, sysfs string) (map[string]string, error) {
	out := map[string]string{}
	if len(snap.GPUs) == 0 {
		// Like gpu-feature-discovery: a node without a GPU gets no GPU, driver or sharing
		// labels (those it had are removed); only the vGPU one.
		vgpuLabels(nil, sysfs, out)
		return out, nil
	}
	out[Count] = strconv.Itoa(len(snap.GPUs))
	d := snap.Driver
	parts := append(strings.SplitN(d.Version, ".", 3), "", "")
	out[DriverVersionFull], out[DriverVersionMajor], out[DriverVersionMinor], out[DriverVersionRev] = d.Version, parts[0], parts[1], parts[2]
	out[LegacyDriverMajor], out[LegacyDriverMinor], out[LegacyDriverRev] = parts[0], parts[1], parts[2]
	cmaj, cmin, _ := strings.Cut(d.CUDAVersion, ".")
	out[RuntimeVersionFull], out[RuntimeVersionMajor], out[RuntimeVersionMinor] = d.CUDAVersion, cmaj, cmin
	out[LegacyRuntimeMajor], out[LegacyRuntimeMinor] = cmaj, cmin

	deviceLabels(snap.GPUs[0], out)
	out[Machine] = machine(sysfs)
	out[Mode] = gpuMode(snap.GPUs, sysfs)
	vgpuLabels(snap.GPUs, sysfs, out)
	if err := resourceLabels(snap.GPUs, dp, out); err != nil {
		return nil, err
	}
	return out, nil
}

func deviceLabels(g nodefacts.GPU, out map[string]string) {
	out[Product] = config.ProductLabel(g.Name)
	out[Memory] = strconv.FormatUint(g.MemoryMiB, 10)
	out[ComputeMajor], out[ComputeMinor] = strconv.Itoa(g.ComputeMajor), strconv.Itoa(g.ComputeMinor)
	out[Family] = family(g.ComputeMajor, g.ComputeMinor)
	out[MIGCapable] = strconv.FormatBool(g.MIGCapable)
}
