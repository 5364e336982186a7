package gpulib

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
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

// Empty slots (NOT_FOUND, INVALID_ARGUMENT) are skipped as go-nvlib does; any other failure
// stops the walk with the handles before it and the call's name.
func TestMIGHandles(t *testing.T) {
	mig := &mock.Device{}
	slots := []nvml.Return{nvml.SUCCESS, nvml.ERROR_NOT_FOUND, nvml.ERROR_INVALID_ARGUMENT, nvml.SUCCESS, nvml.ERROR_UNKNOWN, nvml.SUCCESS}
	dev := &mock.Device{
		GetMaxMigDeviceCountFunc: func() (int, nvml.Return) { return 4, nvml.SUCCESS },
		GetMigDeviceHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			if slots[i] != nvml.SUCCESS {
				return nil, slots[i]
			}
			return mig, nvml.SUCCESS
		},
	}
	if h, call, ret := MIGHandles(dev); len(h) != 2 || call != "" || ret != nvml.SUCCESS {
		t.Fatalf("4 slots, 2 empty: %d handles, %q %v", len(h), call, ret)
	}
	dev.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return len(slots), nvml.SUCCESS }
	if h, call, ret := MIGHandles(dev); len(h) != 2 || call != "nvmlDeviceGetMigDeviceHandleByIndex" || ret != nvml.ERROR_UNKNOWN {
		t.Fatalf("failing slot 4: %d handles, %q %v", len(h), call, ret)
	}
	dev.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
	if h, call, ret := MIGHandles(dev); h != nil || call != "nvmlDeviceGetMaxMigDeviceCount" || ret != nvml.ERROR_NOT_SUPPORTED {
		t.Fatalf("no MIG: %d handles, %q %v", len(h), call, ret)
	}
}
