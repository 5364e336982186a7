package collector

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func TestMIGProfileName(t *testing.T) {
	for _, c := range []struct {
		a    nvml.DeviceAttributes
		want string
	}{
		{nvml.DeviceAttributes{GpuInstanceSliceCount: 1, ComputeInstanceSliceCount: 1, MemorySizeMB: 4864}, "1g.5gb"},
		{nvml.DeviceAttributes{GpuInstanceSliceCount: 3, ComputeInstanceSliceCount: 3, MemorySizeMB: 19968}, "3g.20gb"},
		{nvml.DeviceAttributes{GpuInstanceSliceCount: 7, ComputeInstanceSliceCount: 7, MemorySizeMB: 40192}, "7g.40gb"},
		{nvml.DeviceAttributes{GpuInstanceSliceCount: 4, ComputeInstanceSliceCount: 1, MemorySizeMB: 19968}, "1c.4g.20gb"},
		{nvml.DeviceAttributes{GpuInstanceSliceCount: 1, ComputeInstanceSliceCount: 1, MemorySizeMB: 11008}, "1g.11gb"},
	} {
		if got := migProfileName(c.a); got != c.want {
			t.Errorf("migProfileName(%+v) = %q, want %q", c.a, got, c.want)
		}
	}
}

func TestReturnNames(t *testing.T) {
	if got := returnName(nvml.ERROR_GPU_IS_LOST); got != "ERROR_GPU_IS_LOST" {
		t.Errorf("returnName(GPU_IS_LOST) = %q", got)
	}
	if got := returnName(nvml.Return(12345)); got != "ERROR_CODE_12345" {
		t.Errorf("returnName(12345) = %q", got)
	}
	if !gpuGone(nvml.ERROR_GPU_IS_LOST) || gpuGone(nvml.ERROR_NOT_SUPPORTED) || !unsupported(nvml.ERROR_NOT_SUPPORTED) {
		t.Error("error classification wrong")
	}
}
