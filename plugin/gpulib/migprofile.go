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

// profileSuffix is the media-engine or graphics part of a GPU instance profile's name, by
// NVML profile id (nvidia-smi mig -lgip).
var profileSuffix = map[uint32]string{
	nvml.GPU_INSTANCE_PROFILE_1_SLICE_REV1:   "+me",
	nvml.GPU_INSTANCE_PROFILE_2_SLICE_REV1:   "+me",
	nvml.GPU_INSTANCE_PROFILE_1_SLICE_NO_ME:  "-me",
	nvml.GPU_INSTANCE_PROFILE_2_SLICE_NO_ME:  "-me",
	nvml.GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME: "+me.all",
	nvml.GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME: "+me.all",
	nvml.GPU_INSTANCE_PROFILE_1_SLICE_GFX:    "+gfx",
	nvml.GPU_INSTANCE_PROFILE_2_SLICE_GFX:    "+gfx",
	nvml.GPU_INSTANCE_PROFILE_3_SLICE_GFX:    "+gfx",
	nvml.GPU_INSTANCE_PROFILE_4_SLICE_GFX:    "+gfx",
}

// GPUInstanceProfileName is the name of a GPU instance profile as a MIG layout writes it
// ("1g.10gb", "1g.10gb+me"): MIGProfileName of an instance spanning it, plus the suffix of
// its media engines. The MIG step matches layouts to NVML's profiles by it.
func GPUInstanceProfileName(p nvml.GpuInstanceProfileInfo) string {
	return MIGProfileName(nvml.DeviceAttributes{GpuInstanceSliceCount: p.SliceCount, MemorySizeMB: p.MemorySizeMB}) + profileSuffix[p.Id]
}

// MIGHandles returns the handles of the MIG devices of dev (a GPU in MIG mode) in slot order.
// Empty slots are skipped as go-nvlib's VisitMigDevices skips them: NVML answers
// ERROR_NOT_FOUND, or ERROR_INVALID_ARGUMENT, for a slot without a device. On any other
// failure it returns the handles before it, NVML's name of the failed call and its return.
func MIGHandles(dev nvml.Device) (handles []nvml.Device, failed string, ret nvml.Return) {
	slots, ret := dev.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return nil, "nvmlDeviceGetMaxMigDeviceCount", ret
	}
	for s := range slots {
		h, ret := dev.GetMigDeviceHandleByIndex(s)
		switch ret {
		case nvml.SUCCESS:
			handles = append(handles, h)
		case nvml.ERROR_NOT_FOUND, nvml.ERROR_INVALID_ARGUMENT:
		default:
			return handles, "nvmlDeviceGetMigDeviceHandleByIndex", ret
		}
	}
	return handles, "", nvml.SUCCESS
}
