package deviceplugin_test

import (
	"path/filepath"
	"slices"
	"testing"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/gpupolicy/gpupolicy/plugin/agent/migmanager"
	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/gpulib/gpumock"
	"github.com/gpupolicy/gpupolicy/plugin/mig"
)

// The MIG step (its own process on a node, here its own mock) applies a layout; the device
// plugin, started afterwards as the reopened gate starts it, reads the same hardware state and
// advertises exactly the MIG devices the layout made, to a real gRPC kubelet.
func TestAdvertisesTheLayoutTheMIGStepApplied(t *testing.T) {
	state := filepath.Join(t.TempDir(), "mig.json")
	agent, err := gpumock.New("dgxa100", gpumock.WithMIGStateFile(state))
	if err != nil {
		t.Fatal(err)
	}
	balanced := []mig.DeviceConfig{
		{Devices: mig.Devices{Indexes: []int{0, 1, 2, 3}}, MigEnabled: true, MigDevices: map[string]int{"3g.20gb": 2}},
		{Devices: mig.Devices{Indexes: []int{4, 5, 6, 7}}, MigEnabled: true, MigDevices: map[string]int{"1g.5gb": 7}},
	}
	if _, err := migmanager.Apply(agent, balanced, nil); err != nil {
		t.Fatalf("apply: %v", err)
	}

	h, k := newHarness(t, setup{kubelet: true, mockOpts: []gpumock.Option{gpumock.WithMIGStateFile(state)},
		cfg: func(c *config.DevicePlugin) { c.MIGStrategy = config.MIGMixed }})
	// nvidia.com/gpu stays registered with no devices: every GPU is partitioned, and the
	// kubelet then reports 0 allocatable instead of a stale count.
	want := map[string]int{"nvidia.com/gpu": 0, "nvidia.com/mig-3g.20gb": 8, "nvidia.com/mig-1g.5gb": 28}
	regs := waitRegistrations(t, k, len(want))
	var names []string
	for _, r := range regs {
		names = append(names, r.ResourceName)
	}
	if got := sorted(names); !slices.Equal(got, []string{"nvidia.com/gpu", "nvidia.com/mig-1g.5gb", "nvidia.com/mig-3g.20gb"}) {
		t.Fatalf("registered %v, want nvidia.com/gpu and the layout's two MIG resources", got)
	}
	for res, n := range want {
		list := next(t, watch(t, h.client(k, res)), res, func(l []*pluginapi.Device) bool { return len(l) == n })
		for _, d := range list {
			if d.Health != pluginapi.Healthy {
				t.Errorf("%s: %s is %s", res, d.ID, d.Health)
			}
		}
	}
}
