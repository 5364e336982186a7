package labels

import (
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpupolicy/gpupolicy/plugin/config"
)

func TestMIGSingle(t *testing.T) {
	m := mock(t)
	for gpu := range 8 {
		if err := m.ConfigureMIG(gpu, nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.GPU_INSTANCE_PROFILE_1_SLICE); err != nil {
			t.Fatal(err)
		}
	}
	got, err := FromNVML(m, config.DevicePlugin{MIGStrategy: config.MIGSingle}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(got[Product], "A100-SXM4-40GB-MIG-1g.5gb") || got[Count] != "16" || got["nvidia.com/gpu.memory"] != "4864" ||
		got["nvidia.com/gpu.slices.gi"] != "1" || got[MIGStrategy] != "single" || got[MIGCapable] != "true" {
		t.Fatalf("single: %v", got)
	}

	// One GPU without MIG: the single strategy cannot advertise one kind of device.
	if err := m.ConfigureMIG(3); err != nil {
		t.Fatal(err)
	}
	got, err = FromNVML(m, config.DevicePlugin{MIGStrategy: config.MIGSingle}, t.TempDir())
	if err != nil || !strings.HasSuffix(got[Product], "-MIG-INVALID") || got[Count] != "0" {
		t.Fatalf("invalid single: %v %v", got, err)
	}
}

func TestMIGMixed(t *testing.T) {
	m := mock(t)
	if err := m.ConfigureMIG(0, nvml.GPU_INSTANCE_PROFILE_3_SLICE, nvml.GPU_INSTANCE_PROFILE_4_SLICE); err != nil {
		t.Fatal(err)
	}
	if err := m.ConfigureMIG(1, nvml.GPU_INSTANCE_PROFILE_3_SLICE); err != nil {
		t.Fatal(err)
	}
	got, err := FromNVML(m, config.DevicePlugin{MIGStrategy: config.MIGMixed}, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if got["nvidia.com/mig-3g.20gb.count"] != "2" || got["nvidia.com/mig-4g.20gb.count"] != "1" || got["nvidia.com/mig-4g.20gb.slices.gi"] != "4" || got[Count] != "8" {
		t.Fatalf("mixed: %v", got)
	}
	if _, err := FromNVML(m, config.DevicePlugin{MIGStrategy: "both"}, t.TempDir()); err == nil || !strings.Contains(err.Error(), "migStrategy") {
		t.Fatalf("bad strategy: %v", err)
	}
}

func TestWithRemovals(t *testing.T) {
	node := map[string]string{
		"nvidia.com/mig-1g.5gb.count": "14", "nvidia.com/gpu.multiprocessors": "14", Count: "8",
		"nvidia.com/gpu.deploy.device-plugin": "true", "nvidia.com/gpu.driver.version": "580.95.05",
		"nvidia.com/gpu.present": "true", "team": "ml",
	}
	got := WithRemovals(node, map[string]string{Count: "8"})
	want := map[string]string{Count: "8", "nvidia.com/mig-1g.5gb.count": "", "nvidia.com/gpu.multiprocessors": ""}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
}
