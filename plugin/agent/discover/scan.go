// Package discover finds NVIDIA GPUs on the PCI bus, without a driver or NVML, and sets
// nvidia.com/gpu.present=true on its own Node: the entry label every stage DaemonSet
// requires. It never overwrites a value a person set (a "false" is the opt-out), never
// touches another label, and reports a GPU that left the bus as a Warning Event instead of
// removing the label: the later stages' checks and the node agent say what is wrong.
package discover

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// PCIDevicesDir is where the kernel lists PCI functions, each entry a symlink into
// /sys/devices; the DaemonSet therefore mounts all of /sys (read-only), not only this
// directory, or the relative links would dangle.
const PCIDevicesDir = "/sys/bus/pci/devices"

// VendorNVIDIA is NVIDIA's PCI vendor id as sysfs writes it.
const VendorNVIDIA = "0x10de"

// gpuClasses are the PCI class/subclass prefixes of a GPU: VGA-compatible display
// controller (0x0300xx) and 3D controller (0x0302xx, data-centre GPUs without a display).
// NVIDIA's audio (0x0403) and USB (0x0c03) functions on the same card are not GPUs.
var gpuClasses = []string{"0x0300", "0x0302"}

// Device is one NVIDIA GPU function on the bus.
type Device struct {
	Address string `json:"address"` // PCI address, e.g. 0000:3b:00.0
	Class   string `json:"class"`   // e.g. 0x030200
}

// Scan lists the NVIDIA GPUs under hostRoot's /sys/bus/pci/devices, sorted by address. A
// missing devices directory is an error (sysfs not mounted), not "no GPU": a CPU node has
// the directory with other vendors' functions in it.
func Scan(hostRoot string) ([]Device, error) {
	dir := filepath.Join(hostRoot, PCIDevicesDir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read PCI devices: %w (mount the host's /sys read-only at %s/sys)", err, hostRoot)
	}
	out := []Device{}
	for _, e := range entries {
		vendor, err := readAttr(filepath.Join(dir, e.Name(), "vendor"))
		if err != nil {
			return nil, err
		}
		if vendor != VendorNVIDIA {
			continue
		}
		class, err := readAttr(filepath.Join(dir, e.Name(), "class"))
		if err != nil {
			return nil, err
		}
		if slices.ContainsFunc(gpuClasses, func(p string) bool { return strings.HasPrefix(class, p) }) {
			out = append(out, Device{Address: e.Name(), Class: class})
		}
	}
	slices.SortFunc(out, func(a, b Device) int { return strings.Compare(a.Address, b.Address) })
	return out, nil
}

// readAttr reads one sysfs attribute, lower-cased and trimmed. A function removed between
// the directory read and this read (hot unplug) reads as "" rather than failing the scan.
func readAttr(path string) (string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read PCI attribute: %w", err)
	}
	return strings.ToLower(strings.TrimSpace(string(b))), nil
}

// Addresses are the devices' PCI addresses.
func Addresses(ds []Device) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.Address
	}
	return out
}
