package nodefacts

import (
	"errors"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpupolicy/gpupolicy/plugin/gpulib/gpumock"
)

func TestReadDriverAndIdentity(t *testing.T) {
	m, err := gpumock.New("dgxa100", gpumock.WithDriverVersion("580.95.05"), gpumock.WithCUDADriverVersion(12080))
	if err != nil {
		t.Fatal(err)
	}
	d, failed := ReadDriver(m)
	if len(failed) != 0 || d.Version != "580.95.05" || d.CUDAVersion != "12.8" || d.NVMLVersion == "" {
		t.Fatalf("driver %+v, failed %v", d, failed)
	}
	dev, _ := m.DeviceGetHandleByIndex(3)
	id, failed := ReadIdentity(dev, 3)
	if len(failed) != 0 || id.Index != 3 || !strings.HasPrefix(id.UUID, "GPU-") || id.PCIBusID != "00000000:03:00.0" ||
		!strings.HasPrefix(id.Device, "nvidia") || id.Model != "NVIDIA A100-SXM4-40GB" {
		t.Fatalf("identity %+v, failed %v", id, failed)
	}
}

// A call that fails leaves its field empty and is named with what it returned; the other
// fields are still read.
func TestReadReportsEachFailedCall(t *testing.T) {
	m, err := gpumock.New("dgxa100")
	if err != nil {
		t.Fatal(err)
	}
	m.SystemGetCudaDriverVersionFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
	d, failed := ReadDriver(m)
	if d.Version == "" || d.CUDAVersion != "" || len(failed) != 1 || failed[0].Call != "nvmlSystemGetCudaDriverVersion" ||
		!strings.Contains(failed[0].Error(), "nvmlSystemGetCudaDriverVersion: ") {
		t.Fatalf("driver %+v, failed %v", d, failed)
	}
	dev := m.Devices[0].(*server.Device)
	dev.GetNameFunc = func() (string, nvml.Return) { return "", nvml.ERROR_GPU_IS_LOST }
	id, failed := ReadIdentity(dev, 0)
	var f Failed
	if id.Model != "" || id.UUID == "" || len(failed) != 1 || !errors.As(error(failed[0]), &f) || f.Ret != nvml.ERROR_GPU_IS_LOST {
		t.Fatalf("identity %+v, failed %v", id, failed)
	}
}

// ReadGPUs reads every GPU, MIG layout included, and stops at a call that fails.
func TestReadGPUs(t *testing.T) {
	m, err := gpumock.New("dgxa100")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.ConfigureMIG(0, nvml.GPU_INSTANCE_PROFILE_3_SLICE, nvml.GPU_INSTANCE_PROFILE_4_SLICE); err != nil {
		t.Fatal(err)
	}
	gpus, err := ReadGPUs(m, 8)
	if err != nil || len(gpus) != 8 {
		t.Fatalf("%d GPUs, %v", len(gpus), err)
	}
	g := gpus[0]
	if g.Name != "NVIDIA A100-SXM4-40GB" || g.MemoryMiB != 40960 || g.ComputeMajor != 8 || !g.PCIOK || !g.VirtualizationOK ||
		!g.MIGCapable || !g.MIGEnabled || len(g.MIG) != 2 || g.MIG[0].Profile != "3g.20gb" || g.MIG[1].Profile != "4g.20gb" {
		t.Fatalf("GPU 0: %+v", g)
	}
	if gpus[1].MIGEnabled || !gpus[1].MIGCapable || gpus[1].MIG != nil {
		t.Fatalf("GPU 1 has MIG off: %+v", gpus[1])
	}
	m.Devices[5].(*server.Device).GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST }
	if _, err := ReadGPUs(m, 8); err == nil || !strings.Contains(err.Error(), "nvmlDeviceGetMemoryInfo") {
		t.Fatalf("a lost GPU: %v", err)
	}
}
