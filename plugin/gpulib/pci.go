package gpulib

import "github.com/NVIDIA/go-nvml/pkg/nvml"

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
