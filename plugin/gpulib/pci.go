package gpulib

import (
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// BusID is NVML's PCI bus id of a GPU ("00000000:07:00.0"): PciInfo.BusId is a C string in a
// fixed array, ended by its first NUL.
func BusID(p nvml.PciInfo) string {
	b := make([]byte, 0, len(p.BusId))
	for _, c := range p.BusId {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return string(b)
}

// SysfsAddress is the GPU's name under /sys/bus/pci/devices ("0000:07:00.0"): NVML's bus id
// lower-cased, its 8-digit domain cut to the kernel's 4 digits (as go-nvlib's GetPCIBusID).
func SysfsAddress(p nvml.PciInfo) string {
	id := strings.ToLower(BusID(p))
	if len(id) > 9 && id[8] == ':' && strings.HasPrefix(id, "0000") {
		id = id[4:]
	}
	return id
}
