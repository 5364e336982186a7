package gpumock

// MIG on the mock: ConfigureMIG partitions a GPU the way `nvidia-smi mig -cgi ... -C` does, and
// the parent then enumerates MIG device handles that answer like real ones (UUID "MIG-...",
// attributes with slice counts and memory, instance ids, parent handle).

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/google/uuid"
)

// computeProfileForSlices is the compute-instance profile that spans a whole GPU instance.
var computeProfileForSlices = map[uint32]int{
	1: nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE,
	2: nvml.COMPUTE_INSTANCE_PROFILE_2_SLICE,
	3: nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE,
	4: nvml.COMPUTE_INSTANCE_PROFILE_4_SLICE,
	7: nvml.COMPUTE_INSTANCE_PROFILE_7_SLICE,
}

// ConfigureMIG enables MIG on GPU gpu and creates one GPU instance per profile id
// (nvml.GPU_INSTANCE_PROFILE_*), each with one compute instance spanning it. With no profile
// ids it disables MIG again.
func (m *Mock) ConfigureMIG(gpu int, giProfiles ...int) error {
	st, err := m.state(gpu)
	if err != nil {
		return err
	}
	parent := st.gpus[gpu]
	var migs []*mock.Device
	for _, id := range giProfiles {
		info, ret := parent.GetGpuInstanceProfileInfo(id)
		if ret != nvml.SUCCESS {
			return fmt.Errorf("mock GPU %d: GPU instance profile %d: %s", gpu, id, nvml.ErrorString(ret))
		}
		gi, _ := parent.CreateGpuInstance(&info)
		ciID, ok := computeProfileForSlices[info.SliceCount]
		if !ok {
			return fmt.Errorf("mock GPU %d: no compute profile spans %d slices", gpu, info.SliceCount)
		}
		ciInfo, ret := gi.GetComputeInstanceProfileInfo(ciID, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret != nvml.SUCCESS {
			return fmt.Errorf("mock GPU %d: compute profile %d: %s", gpu, ciID, nvml.ErrorString(ret))
		}
		ci, _ := gi.CreateComputeInstance(&ciInfo)
		giInfo, _ := gi.GetInfo()
		ciData, _ := ci.GetInfo()
		migs = append(migs, newMockMIGDevice(st, gpu, parent, info, ciInfo, int(giInfo.Id), int(ciData.Id)))
	}
	mode := nvml.DEVICE_MIG_DISABLE
	if len(giProfiles) > 0 {
		mode = nvml.DEVICE_MIG_ENABLE
	}
	parent.SetMigMode(mode)
	st.mu.Lock()
	st.migs[gpu] = migs
	st.mu.Unlock()
	return nil
}

func newMockMIGDevice(st *deviceState, gpu int, parent *server.Device, gi nvml.GpuInstanceProfileInfo,
	ci nvml.ComputeInstanceProfileInfo, giID, ciID int) *mock.Device {
	// Deterministic per parent and instance, so a reconfigured mock keeps its MIG UUIDs.
	id := "MIG-" + uuid.NewSHA1(uuid.NameSpaceOID, fmt.Appendf(nil, "%s/%d/%d", parent.UUID, giID, ciID)).String()
	d := &mock.Device{}
	d.GetUUIDFunc = func() (string, nvml.Return) { return id, nvml.SUCCESS }
	d.GetNameFunc = func() (string, nvml.Return) { return parent.Config.Name, nvml.SUCCESS }
	d.IsMigDeviceHandleFunc = func() (bool, nvml.Return) { return true, nvml.SUCCESS }
	d.GetDeviceHandleFromMigDeviceHandleFunc = func() (nvml.Device, nvml.Return) { return parent, nvml.SUCCESS }
	d.GetGpuInstanceIdFunc = func() (int, nvml.Return) { return giID, nvml.SUCCESS }
	d.GetComputeInstanceIdFunc = func() (int, nvml.Return) { return ciID, nvml.SUCCESS }
	d.GetAttributesFunc = func() (nvml.DeviceAttributes, nvml.Return) {
		return nvml.DeviceAttributes{
			MultiprocessorCount:       ci.MultiprocessorCount,
			SharedCopyEngineCount:     gi.CopyEngineCount,
			SharedDecoderCount:        gi.DecoderCount,
			SharedEncoderCount:        gi.EncoderCount,
			SharedJpegCount:           gi.JpegCount,
			SharedOfaCount:            gi.OfaCount,
			GpuInstanceSliceCount:     gi.SliceCount,
			ComputeInstanceSliceCount: ci.SliceCount,
			MemorySizeMB:              gi.MemorySizeMB,
		}, nvml.SUCCESS
	}
	d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		if st.isLost(gpu) {
			return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST
		}
		return nvml.Memory{Total: gi.MemorySizeMB << 20, Free: gi.MemorySizeMB << 20}, nvml.SUCCESS
	}
	return d
}
