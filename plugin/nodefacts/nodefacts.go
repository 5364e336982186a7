// Package nodefacts is what the node programs learn about their node, in two snapshot types
// split at the privilege line, each with one reader:
//
//   - Snapshot, from NVML (this package): the driver (driver, CUDA and NVML versions) and each
//     GPU's identity, model, memory, compute capability, virtualization and MIG mode with its
//     MIG devices. A program reads it once per period and everything it computes in that
//     period reads the same one: the feature labels (plugin/agent/labels), the driver
//     validator's NVML view (plugin/agent/driver), and the exporter's driver and GPU identity
//     labels (plugin/exporter/collector).
//   - hostfacts.Facts, from host files (plugin/nodefacts/hostfacts): the loaded kernel
//     module's version and the toolkit stage's record. The gate runs unprivileged, without the
//     nvidia runtime, so it reads no NVML: its reconciler reads the host facts and the Node once
//     per pass (gate.Facts), and every stage check, the labels it plans and the GPUStackReady
//     condition judge that one reading.
package nodefacts

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpupolicy/gpupolicy/plugin/gpulib"
)

// Failed is one NVML call that did not succeed: NVML's name for it ("nvmlDeviceGetName") and
// what it returned. Readers return them rather than stop, so one unanswered call does not hide
// the others; each program decides what a failure means to it.
type Failed struct {
	Call string
	Ret  nvml.Return
}

func (f Failed) Error() string { return fmt.Sprintf("%s: %s", f.Call, nvml.ErrorString(f.Ret)) }

// Driver is the node's driver as NVML reports it.
type Driver struct {
	Version     string // "580.95.05"
	CUDAVersion string // "12.8": the newest CUDA the driver supports
	NVMLVersion string
}

// CallNVMLVersion is ReadDriver's call for the NVML library's own version, which only the
// exporter reports: the others ignore its failure.
const CallNVMLVersion = "nvmlSystemGetNVMLVersion"

// ReadDriver reads the driver, CUDA and NVML versions.
func ReadDriver(lib nvml.Interface) (d Driver, failed []Failed) {
	if v, ret := lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		d.Version = v
	} else {
		failed = append(failed, Failed{"nvmlSystemGetDriverVersion", ret})
	}
	if v, ret := lib.SystemGetCudaDriverVersion(); ret == nvml.SUCCESS {
		d.CUDAVersion = gpulib.CUDAVersion(v)
	} else {
		failed = append(failed, Failed{"nvmlSystemGetCudaDriverVersion", ret})
	}
	if v, ret := lib.SystemGetNVMLVersion(); ret == nvml.SUCCESS {
		d.NVMLVersion = v
	} else {
		failed = append(failed, Failed{CallNVMLVersion, ret})
	}
	return d, failed
}

// Identity names a GPU the way dcgm-exporter's labels do.
type Identity struct {
	Index    int    // NVML index: label "gpu"
	UUID     string // "GPU-..."
	PCIBusID string // "00000000:07:00.0", NVML's form
	Device   string // "nvidia<minor>"
	Model    string // "NVIDIA A100-SXM4-40GB"
}

// ReadIdentity reads the identity of GPU index (handle dev); a field whose call failed stays
// empty.
func ReadIdentity(dev nvml.Device, index int) (id Identity, failed []Failed) {
	id.Index = index
	if uuid, ret := dev.GetUUID(); ret == nvml.SUCCESS {
		id.UUID = uuid
	} else {
		failed = append(failed, Failed{"nvmlDeviceGetUUID", ret})
	}
	if pci, ret := dev.GetPciInfo(); ret == nvml.SUCCESS {
		id.PCIBusID = gpulib.BusID(pci)
	} else {
		failed = append(failed, Failed{"nvmlDeviceGetPciInfo", ret})
	}
	if minor, ret := dev.GetMinorNumber(); ret == nvml.SUCCESS {
		id.Device = fmt.Sprintf("nvidia%d", minor)
	} else {
		failed = append(failed, Failed{"nvmlDeviceGetMinorNumber", ret})
	}
	if name, ret := dev.GetName(); ret == nvml.SUCCESS {
		id.Model = name
	} else {
		failed = append(failed, Failed{"nvmlDeviceGetName", ret})
	}
	return id, failed
}

// GPU is what the feature labels read of one GPU.
type GPU struct {
	Name                       string
	MemoryMiB                  uint64
	ComputeMajor, ComputeMinor int
	// PCI is NVML's PCI info (gpulib.SysfsAddress names the GPU's sysfs directory by it);
	// PCIOK is false when NVML did not answer.
	PCI   nvml.PciInfo
	PCIOK bool
	// MIGCapable: NVML answers the GPU's MIG mode; MIGEnabled: MIG is on, with MIG devices.
	MIGCapable, MIGEnabled bool
	MIG                    []MIGDevice
	// Virtualization is NVML's virtualization mode (a vGPU guest's GPU says VGPU);
	// VirtualizationOK is false when NVML did not answer.
	Virtualization   nvml.GpuVirtualizationMode
	VirtualizationOK bool
}

// MIGDevice is one MIG device's shape.
type MIGDevice struct {
	Profile    string // "1g.5gb"
	Attributes nvml.DeviceAttributes
}

// ReadGPUs reads the first count GPUs' model, memory, compute capability and MIG layout.
// Unlike ReadDriver and ReadIdentity it stops at the first of those calls that fails, since a
// GPU NVML cannot describe would be described wrongly: the error is that Failed. A MIG mode
// NVML does not support is no MIG; the PCI info and virtualization mode are optional (the OK
// fields).
func ReadGPUs(lib nvml.Interface, count int) ([]GPU, error) {
	gpus := make([]GPU, count)
	for i := range gpus {
		dev, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, Failed{fmt.Sprintf("nvmlDeviceGetHandleByIndex(%d)", i), ret}
		}
		if err := readGPU(dev, &gpus[i]); err != nil {
			return nil, err
		}
	}
	return gpus, nil
}

func readGPU(dev nvml.Device, g *GPU) error {
	var ret nvml.Return
	if g.Name, ret = dev.GetName(); ret != nvml.SUCCESS {
		return Failed{"nvmlDeviceGetName", ret}
	}
	mem, ret := dev.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return Failed{"nvmlDeviceGetMemoryInfo", ret}
	}
	g.MemoryMiB = mem.Total / (1024 * 1024)
	if g.ComputeMajor, g.ComputeMinor, ret = dev.GetCudaComputeCapability(); ret != nvml.SUCCESS {
		return Failed{"nvmlDeviceGetCudaComputeCapability", ret}
	}
	g.PCI, ret = dev.GetPciInfo()
	g.PCIOK = ret == nvml.SUCCESS
	g.Virtualization, ret = dev.GetVirtualizationMode()
	g.VirtualizationOK = ret == nvml.SUCCESS
	mode, _, ret := dev.GetMigMode()
	switch ret {
	case nvml.ERROR_NOT_SUPPORTED:
		return nil
	case nvml.SUCCESS:
	default:
		return Failed{"nvmlDeviceGetMigMode", ret}
	}
	g.MIGCapable, g.MIGEnabled = true, mode == nvml.DEVICE_MIG_ENABLE
	if !g.MIGEnabled {
		return nil
	}
	migs, call, ret := gpulib.MIGHandles(dev)
	if ret != nvml.SUCCESS {
		return Failed{call, ret}
	}
	for _, mig := range migs {
		attr, ret := mig.GetAttributes()
		if ret != nvml.SUCCESS {
			return Failed{"nvmlDeviceGetAttributes", ret}
		}
		g.MIG = append(g.MIG, MIGDevice{Profile: gpulib.MIGProfileName(attr), Attributes: attr})
	}
	return nil
}

// Snapshot is one reading of the driver and the GPUs.
type Snapshot struct {
	Driver Driver
	GPUs   []GPU
}
