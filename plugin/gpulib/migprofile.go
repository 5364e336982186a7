package gpulib

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// MIGProfileName is the MIG profile name nvidia-smi and NVIDIA's device plugin use:
// "<g>g.<mem>gb", or "<c>c.<g>g.<mem>gb" when the compute instance spans fewer slices than its
// GPU instance. Memory is rounded up to whole GB (4864 MB -> 5gb). The device plugin's resource
// names, the MIG node labels and the exporter's metric labels all use it, so they agree.
func MIGProfileName(a nvml.DeviceAttributes) string {
	gb := (a.MemorySizeMB + 1023) / 1024
	if a.ComputeInstanceSliceCount != 0 && a.ComputeInstanceSliceCount < a.GpuInstanceSliceCount {
		return fmt.Sprintf("%dc.%dg.%dgb", a.ComputeInstanceSliceCount, a.GpuInstanceSliceCount, gb)
	}
	return fmt.Sprintf("%dg.%dgb", a.GpuInstanceSliceCount, gb)
}
