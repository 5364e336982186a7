package migmanager

import (
	"slices"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpupolicy/gpupolicy/plugin/exporter/podresources"
	"github.com/gpupolicy/gpupolicy/plugin/gpulib/gpumock"
)

// TestHoldersSeeDRAClaims: a GPU whose MIG device a pod holds through a DRA claim (keyed by
// podresources.MIGKey), or whose whole GPU it holds (by index), is held: the MIG step must not
// repartition it.
func TestHoldersSeeDRAClaims(t *testing.T) {
	m, err := gpumock.New("dgxa100")
	if err != nil {
		t.Fatal(err)
	}
	m.Init()
	if err := m.ConfigureMIG(2, nvml.GPU_INSTANCE_PROFILE_1_SLICE); err != nil {
		t.Fatal(err)
	}
	dev, _ := m.DeviceGetHandleByIndex(2)
	md, _ := dev.GetMigDeviceHandleByIndex(0)
	gi, _ := md.GetGpuInstanceId()
	mapping := map[string][]podresources.PodRef{
		podresources.MIGKey(2, gi): {{Namespace: "ml", Pod: "slice"}},
		"6":                        {{Namespace: "ml", Pod: "whole"}},
	}
	h, err := holdersOf(m, func(id string) []podresources.PodRef { return mapping[id] })
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(h[2], []string{"ml/slice"}) || !slices.Equal(h[6], []string{"ml/whole"}) || len(h) != 2 {
		t.Errorf("holders %v", h)
	}
}
