package devices_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/deviceplugin/devices"
	"github.com/gpupolicy/gpupolicy/plugin/gpulib/gpumock"
)

func busID(s string) nvml.PciInfo {
	var p nvml.PciInfo
	for i := range len(s) {
		p.BusId[i] = int8(s[i])
	}
	return p
}

func TestSysfsBusID(t *testing.T) {
	if got := devices.SysfsBusID(busID("00000000:B7:00.0")); got != "0000:b7:00.0" {
		t.Errorf("got %s", got)
	}
	if got := devices.SysfsBusID(busID("0001:07:00.0")); got != "0001:07:00.0" {
		t.Errorf("got %s", got)
	}
}

func TestEnumerateMIGAndResources(t *testing.T) {
	m, err := gpumock.New("dgxa100")
	if err != nil {
		t.Fatal(err)
	}
	if err := m.ConfigureMIG(2, nvml.GPU_INSTANCE_PROFILE_2_SLICE, nvml.GPU_INSTANCE_PROFILE_1_SLICE); err != nil {
		t.Fatal(err)
	}
	gpus, _, err := devices.Enumerate(m, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if len(gpus) != 8 || !gpus[2].MIGEnabled || len(gpus[2].MIG) != 2 || gpus[2].MIG[0].Profile != "2g.10gb" || gpus[2].MIG[1].Profile != "1g.5gb" {
		t.Fatalf("GPU 2 = %+v", gpus[2])
	}
	if gpus[0].BusID != "0000:00:00.0" || gpus[5].NUMA != 1 {
		t.Fatalf("GPU 0 bus %s, GPU 5 NUMA %d (from NVML when sysfs has none)", gpus[0].BusID, gpus[5].NUMA)
	}
	cfg := config.DevicePlugin{ResourceName: "example.com/gpu", MIGStrategy: "mixed", Sharing: config.Sharing{TimeSlicing: config.TimeSlicing{Replicas: 2}}}
	res, err := devices.Resources(gpus, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range res {
		names = append(names, r.Name)
	}
	if want := []string{"example.com/gpu", "example.com/mig-1g.5gb", "example.com/mig-2g.10gb"}; !slices.Equal(names, want) {
		t.Fatalf("resources %v, want %v", names, want)
	}
	if n := len(res[0].Devices); n != 14 {
		t.Errorf("%d whole-GPU devices, want 7 GPUs x 2 replicas", n)
	}
	if d := res[1].Devices[1]; d.ID != gpus[2].MIG[1].UUID+"::1" || d.GPU != 2 || devices.UUIDOf(d.ID) != d.UUID {
		t.Errorf("MIG replica %+v", d)
	}
	// none ignores MIG mode; single refuses the mixed layout and says why.
	cfg.MIGStrategy = "none"
	if res, _ := devices.Resources(gpus, cfg); len(res) != 1 || len(res[0].Devices) != 16 {
		t.Errorf("none: %+v", res)
	}
	cfg.MIGStrategy = "single"
	_, err = devices.Resources(gpus, cfg)
	if err == nil || !strings.Contains(err.Error(), "MIG on every GPU or on none") || !strings.Contains(err.Error(), "migStrategy mixed") {
		t.Errorf("single on a mixed node: %v", err)
	}
	for i := range 8 {
		if i != 2 {
			if err := m.ConfigureMIG(i, nvml.GPU_INSTANCE_PROFILE_1_SLICE); err != nil {
				t.Fatal(err)
			}
		}
	}
	gpus, _, _ = devices.Enumerate(m, t.TempDir())
	cfg.MIGStrategy = "mixed"
	if res, _ := devices.Resources(gpus, cfg); res[0].Name != "example.com/gpu" || len(res[0].Devices) != 0 {
		t.Errorf("mixed with every GPU partitioned: %+v, want an empty example.com/gpu", res[0])
	}
	cfg.MIGStrategy = "single"
	_, err = devices.Resources(gpus, cfg)
	if err == nil || !strings.Contains(err.Error(), "one MIG profile") || !strings.Contains(err.Error(), "1g.5gb on GPU 0") || !strings.Contains(err.Error(), "2g.10gb on GPU 2") {
		t.Errorf("single with two profiles: %v", err)
	}
}
