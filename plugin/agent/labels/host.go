package labels

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/gpulib"
	"github.com/gpupolicy/gpupolicy/plugin/nodefacts"
)

// The node facts besides NVML, read from sysfs as gpu-feature-discovery reads them: the DMI
// product name (gpu.machine), each GPU's PCI class (gpu.mode) and the NVIDIA functions' PCI
// config space (vgpu.*). In the feature-discovery container sysfs is the container's /sys,
// which shows the host's DMI and PCI attributes; no host path is mounted.

// DefaultSysfs is where sysfs is mounted in the feature-discovery container.
const DefaultSysfs = "/sys"

const (
	dmiProductName = "class/dmi/id/product_name"
	pciDevices     = "bus/pci/devices"
	unknownValue   = "unknown"
	vendorNVIDIA   = "0x10de"

	// PCI classes of a GPU: a VGA-compatible controller drives a display (graphics mode), a
	// 3D controller does not (compute mode, the data-centre default).
	classVGA = 0x030000
	class3D  = 0x030200
)

// machine is the node's DMI product name as a label value, "unknown" when it cannot be read
// (a VM without DMI), as gpu-feature-discovery's machine-type file.
func machine(sysfs string) string {
	b, err := os.ReadFile(filepath.Join(sysfs, dmiProductName))
	if err != nil {
		return unknownValue
	}
	return config.ProductLabel(string(b))
}

// gpuMode is compute or graphics when every GPU has that PCI class, unknown otherwise. A
// class that cannot be read counts as unknown (gpu-feature-discovery fails all labels then;
// one unreadable attribute should not take the node's other labels away).
func gpuMode(gpus []nodefacts.GPU, sysfs string) string {
	mode := ""
	for _, g := range gpus {
		m := unknownValue
		switch pciClass(g, sysfs) {
		case classVGA:
			m = "graphics"
		case class3D:
			m = "compute"
		}
		if mode != "" && m != mode {
			return unknownValue
		}
		mode = m
	}
	if mode == "" {
		return unknownValue
	}
	return mode
}

// pciClass is the GPU's PCI class from sysfs, 0 when it cannot be read.
func pciClass(g nodefacts.GPU, sysfs string) uint64 {
	if !g.PCIOK {
		return 0
	}
	b, err := os.ReadFile(filepath.Join(sysfs, pciDevices, gpulib.SysfsAddress(g.PCI), "class"))
	if err != nil {
		return 0
	}
	class, err := strconv.ParseUint(strings.TrimSpace(string(b)), 0, 32)
	if err != nil {
		return 0
	}
	return class
}

// vGPU guests see NVIDIA's vendor-specific PCI capability (id 0x09) with the signature "VF"
// at bytes 3-4, followed from byte 5 by records of (id, length, data...); record 0 holds the
// host driver's version and branch, 10 NUL-padded bytes each.
const (
	pciConfigSize         = 256
	pciStatus             = 0x06
	pciStatusCapList      = 0x10
	pciCapPointer         = 0x34
	pciCapVendorSpecific  = 0x09
	vgpuRecordsStart      = 5
	vgpuHostDriverRecord  = 0
	vgpuHostDriverField   = 10
	vgpuHostDriverRecSize = 2 + 2*vgpuHostDriverField
)

// vgpuLabels adds vgpu.present (and the host driver's version and branch on a vGPU guest)
// from the NVIDIA functions' PCI config space. Unprivileged, the kernel shows only the first
// 64 bytes of it, where no capability lives: then NVML's virtualization mode says whether a
// GPU is a vGPU, without the host driver labels. Whatever else fails leaves the labels out,
// as gpu-feature-discovery does: not knowing is not "false".
func vgpuLabels(gpus []nodefacts.GPU, sysfs string, out map[string]string) {
	dir := filepath.Join(sysfs, pciDevices)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	present, short := false, false
	var version, branch string
	for _, e := range entries {
		vendor, err := os.ReadFile(filepath.Join(dir, e.Name(), "vendor"))
		if err != nil {
			return
		}
		if strings.TrimSpace(string(vendor)) != vendorNVIDIA {
			continue
		}
		cfg, err := os.ReadFile(filepath.Join(dir, e.Name(), "config"))
		if err != nil {
			return
		}
		if len(cfg) < pciConfigSize {
			short = true
			continue
		}
		capability := vendorCapability(cfg)
		if len(capability) < vgpuRecordsStart || !bytes.Equal(capability[3:5], []byte("VF")) {
			continue
		}
		present = true
		if v, b, ok := hostDriver(capability); ok {
			version, branch = v, b
		}
	}
	if short && !present {
		p, ok := vgpuByNVML(gpus)
		if !ok {
			return
		}
		present = p
	}
	out[config.LabelVGPUPresent] = strconv.FormatBool(present)
	if version != "" || branch != "" {
		out[config.LabelVGPUHostDriverVer], out[config.LabelVGPUHostDriverBr] = version, branch
	}
}

// vendorCapability is the first vendor-specific capability in a PCI config space, nil if
// there is none. The capability list is followed at most once around (a looping list ends).
func vendorCapability(cfg []byte) []byte {
	if cfg[pciStatus]&pciStatusCapList == 0 {
		return nil
	}
	var seen [pciConfigSize]bool
	for pos := int(cfg[pciCapPointer]); pos != 0 && pos+2 < len(cfg) && !seen[pos]; pos = int(cfg[pos+1]) {
		seen[pos] = true
		switch cfg[pos] {
		case 0xff: // a broken list
			return nil
		case pciCapVendorSpecific:
			end := min(pos+int(cfg[pos+2]), len(cfg))
			return cfg[pos:end]
		}
	}
	return nil
}

// hostDriver reads the host driver record of a vGPU capability.
func hostDriver(capability []byte) (version, branch string, ok bool) {
	pos := vgpuRecordsStart
	for pos+1 < len(capability) && capability[pos] != vgpuHostDriverRecord {
		if capability[pos+1] == 0 { // a record of no length would never end the walk
			return "", "", false
		}
		pos += int(capability[pos+1])
	}
	if pos+vgpuHostDriverRecSize > len(capability) {
		return "", "", false
	}
	field := func(at int) string {
		return strings.Trim(string(capability[at:at+vgpuHostDriverField]), "\x00")
	}
	return field(pos + 2), field(pos + 2 + vgpuHostDriverField), true
}

// vgpuByNVML reports whether any GPU runs as a vGPU (virtualization mode VGPU); ok is false
// when NVML could not say.
func vgpuByNVML(gpus []nodefacts.GPU) (present, ok bool) {
	for _, g := range gpus {
		if !g.VirtualizationOK {
			return false, false
		}
		if g.Virtualization == nvml.GPU_VIRTUALIZATION_MODE_VGPU {
			return true, true
		}
	}
	return false, true
}
