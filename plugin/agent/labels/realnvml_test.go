package labels

import (
	"maps"
	"os"
	"slices"
	"testing"

	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/gpulib"
)

// TestRealNVML prints the feature labels of the host's real GPUs. It runs only on a GPU
// machine (GPUPOLICY_REAL_NVML=1).
func TestRealNVML(t *testing.T) {
	if os.Getenv("GPUPOLICY_REAL_NVML") != "1" {
		t.Skip("needs a GPU: set GPUPOLICY_REAL_NVML=1")
	}
	lib, err := gpulib.Open("")
	if err != nil {
		t.Fatal(err)
	}
	defer lib.Shutdown()
	got, err := FromNVML(lib, config.DevicePlugin{ResourceName: "nvidia.com/gpu", MIGStrategy: "none",
		Sharing: config.Sharing{TimeSlicing: config.TimeSlicing{Replicas: 1}}}, DefaultSysfs)
	if err != nil {
		t.Fatal(err)
	}
	keys := slices.Sorted(maps.Keys(got))
	for _, k := range keys {
		t.Logf("%s=%s", k, got[k])
	}
	if got[Count] == "" || got[Count] == "0" {
		t.Fatalf("no GPUs counted: %v", got)
	}
}
