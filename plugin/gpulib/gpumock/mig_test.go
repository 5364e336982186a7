package gpumock

import (
	"path/filepath"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func newA100(t *testing.T, opts ...Option) (*Mock, nvml.Device) {
	t.Helper()
	m, err := New("dgxa100", opts...)
	if err != nil {
		t.Fatal(err)
	}
	d, _ := m.DeviceGetHandleByIndex(0)
	return m, d
}

func profile(t *testing.T, d nvml.Device, id int) nvml.GpuInstanceProfileInfo {
	t.Helper()
	info, ret := d.GetGpuInstanceProfileInfo(id)
	if ret != nvml.SUCCESS {
		t.Fatalf("profile %d: %v", id, ret)
	}
	return info
}

// The mock refuses what an A100 refuses, with NVML's codes.
func TestMIGRefusesLikeAnA100(t *testing.T) {
	_, d := newA100(t)
	one, three, four := profile(t, d, nvml.GPU_INSTANCE_PROFILE_1_SLICE), profile(t, d, nvml.GPU_INSTANCE_PROFILE_3_SLICE), profile(t, d, nvml.GPU_INSTANCE_PROFILE_4_SLICE)
	if _, ret := d.CreateGpuInstance(&one); ret != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("GPU instance without MIG mode: %v", ret)
	}
	if act, ret := d.SetMigMode(nvml.DEVICE_MIG_ENABLE); act != nvml.SUCCESS || ret != nvml.SUCCESS {
		t.Fatalf("enable MIG: %v %v", act, ret)
	}
	for k := range 7 {
		if _, ret := d.CreateGpuInstance(&one); ret != nvml.SUCCESS {
			t.Fatalf("1g #%d: %v", k, ret)
		}
	}
	if _, ret := d.CreateGpuInstance(&one); ret != nvml.ERROR_INSUFFICIENT_RESOURCES {
		t.Errorf("8th 1g: %v", ret)
	}
	if n, _ := d.GetGpuInstanceRemainingCapacity(&one); n != 0 {
		t.Errorf("remaining 1g capacity %d on a full GPU", n)
	}
	if act, ret := d.SetMigMode(nvml.DEVICE_MIG_DISABLE); ret != nvml.ERROR_IN_USE {
		t.Errorf("disable MIG with instances: %v %v", act, ret)
	}
	gis, _ := d.GetGpuInstances(&one)
	for _, gi := range gis {
		if ret := gi.Destroy(); ret != nvml.SUCCESS {
			t.Fatal(ret)
		}
	}
	// 3g at 0 leaves no room for the 4g, whose only placement is 0.
	if _, ret := d.CreateGpuInstanceWithPlacement(&three, &nvml.GpuInstancePlacement{Start: 0, Size: 4}); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if _, ret := d.CreateGpuInstance(&four); ret != nvml.ERROR_INSUFFICIENT_RESOURCES {
		t.Errorf("4g after a 3g at 0: %v", ret)
	}
	if _, ret := d.CreateGpuInstanceWithPlacement(&three, &nvml.GpuInstancePlacement{Start: 2, Size: 4}); ret != nvml.ERROR_INVALID_ARGUMENT {
		t.Errorf("3g at 2 (not a placement of 3g): %v", ret)
	}
	gi, ret := d.CreateGpuInstanceWithPlacement(&three, &nvml.GpuInstancePlacement{Start: 4, Size: 4})
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	ci3, _ := gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_3_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	ci, ret := gi.CreateComputeInstance(&ci3)
	if ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	ci1, _ := gi.GetComputeInstanceProfileInfo(nvml.COMPUTE_INSTANCE_PROFILE_1_SLICE, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
	if _, ret := gi.CreateComputeInstance(&ci1); ret != nvml.ERROR_INSUFFICIENT_RESOURCES {
		t.Errorf("a compute instance past the GPU instance's slices: %v", ret)
	}
	if ret := gi.Destroy(); ret != nvml.ERROR_IN_USE {
		t.Errorf("destroy a GPU instance with a compute instance: %v", ret)
	}
	if n, _ := d.GetMaxMigDeviceCount(); n != 7 {
		t.Errorf("max MIG devices %d", n)
	}
	if md, ret := d.GetMigDeviceHandleByIndex(0); ret != nvml.SUCCESS {
		t.Errorf("MIG device of the 3g: %v", ret)
	} else if a, _ := md.GetAttributes(); a.GpuInstanceSliceCount != 3 {
		t.Errorf("MIG device attributes %+v", a)
	}
	if ret := ci.Destroy(); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if ret := gi.Destroy(); ret != nvml.SUCCESS {
		t.Fatal(ret)
	}
	if _, ret := gi.GetInfo(); ret != nvml.ERROR_NOT_FOUND {
		t.Errorf("a destroyed GPU instance answers %v", ret)
	}
}

// A MIG mode change that needs a reset stays pending until the reset.
func TestMIGModeWaitsForReset(t *testing.T) {
	m, d := newA100(t)
	if err := m.RequireResetForMIG(0, true); err != nil {
		t.Fatal(err)
	}
	act, ret := d.SetMigMode(nvml.DEVICE_MIG_ENABLE)
	if ret != nvml.SUCCESS || act != nvml.ERROR_RESET_REQUIRED {
		t.Fatalf("SetMigMode: activation %v, %v", act, ret)
	}
	if cur, pending, _ := d.GetMigMode(); cur != nvml.DEVICE_MIG_DISABLE || pending != nvml.DEVICE_MIG_ENABLE {
		t.Fatalf("mode %d pending %d", cur, pending)
	}
	if err := m.ResetGPU(0); err != nil {
		t.Fatal(err)
	}
	if cur, _, _ := d.GetMigMode(); cur != nvml.DEVICE_MIG_ENABLE {
		t.Fatalf("mode %d after the reset", cur)
	}
}

// Two processes of one node (two mocks on one state file) see one partitioning.
func TestMIGStateIsSharedThroughTheFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "mig.json")
	a, _ := newA100(t, WithMIGStateFile(file))
	b, db := newA100(t, WithMIGStateFile(file))
	if err := a.ConfigureMIG(0, nvml.GPU_INSTANCE_PROFILE_3_SLICE, nvml.GPU_INSTANCE_PROFILE_4_SLICE); err != nil {
		t.Fatal(err)
	}
	da, _ := a.DeviceGetHandleByIndex(0)
	for k := range 2 {
		ma, ret := da.GetMigDeviceHandleByIndex(k)
		if ret != nvml.SUCCESS {
			t.Fatal(ret)
		}
		mb, ret := db.GetMigDeviceHandleByIndex(k)
		if ret != nvml.SUCCESS {
			t.Fatalf("the other process sees no MIG device %d: %v", k, ret)
		}
		ua, _ := ma.GetUUID()
		ub, _ := mb.GetUUID()
		if ua != ub {
			t.Errorf("MIG device %d: %s vs %s", k, ua, ub)
		}
	}
	if err := b.ConfigureMIG(0); err != nil {
		t.Fatal(err)
	}
	if mode, _, _ := da.GetMigMode(); mode != nvml.DEVICE_MIG_DISABLE {
		t.Errorf("the first process still sees MIG mode %d", mode)
	}
}
