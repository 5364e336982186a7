package gpulib

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// The cases the device plugin, the MIG labels and the exporter each tested when each had its
// own copy of the name.
func TestMIGProfileName(t *testing.T) {
	for _, tc := range []struct {
		a    nvml.DeviceAttributes
		want string
	}{
		{nvml.DeviceAttributes{GpuInstanceSliceCount: 1, ComputeInstanceSliceCount: 1, MemorySizeMB: 4864}, "1g.5gb"},
		{nvml.DeviceAttributes{GpuInstanceSliceCount: 2, ComputeInstanceSliceCount: 2, MemorySizeMB: 9856}, "2g.10gb"},
		{nvml.DeviceAttributes{GpuInstanceSliceCount: 2, ComputeInstanceSliceCount: 1, MemorySizeMB: 9856}, "1c.2g.10gb"},
		{nvml.DeviceAttributes{GpuInstanceSliceCount: 3, ComputeInstanceSliceCount: 1, MemorySizeMB: 19968}, "1c.3g.20gb"},
		{nvml.DeviceAttributes{GpuInstanceSliceCount: 3, ComputeInstanceSliceCount: 3, MemorySizeMB: 19968}, "3g.20gb"},
		{nvml.DeviceAttributes{GpuInstanceSliceCount: 4, ComputeInstanceSliceCount: 1, MemorySizeMB: 19968}, "1c.4g.20gb"},
		{nvml.DeviceAttributes{GpuInstanceSliceCount: 7, ComputeInstanceSliceCount: 7, MemorySizeMB: 40192}, "7g.40gb"},
		{nvml.DeviceAttributes{GpuInstanceSliceCount: 1, ComputeInstanceSliceCount: 1, MemorySizeMB: 11008}, "1g.11gb"},
		// A device that reports no compute instance slices is named by its GPU instance.
		{nvml.DeviceAttributes{GpuInstanceSliceCount: 1, ComputeInstanceSliceCount: 0, MemorySizeMB: 4864}, "1g.5gb"},
	} {
		if got := MIGProfileName(tc.a); got != tc.want {
			t.Errorf("MIGProfileName(%+v) = %q, want %q", tc.a, got, tc.want)
		}
	}
}
