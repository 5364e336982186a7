package collector

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

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
