package migmanager

import (
	"path/filepath"
	"testing"

	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/deviceplugin/devices"
	"github.com/gpupolicy/gpupolicy/plugin/gpulib/gpumock"
	"github.com/gpupolicy/gpupolicy/plugin/mig"
)

// Two 7-slice layouts, so every iteration repartitions all 8 GPUs.
var sevenSlices = [2][]mig.DeviceConfig{
	all(true, map[string]int{"1g.5gb": 7}),
	all(true, map[string]int{"2g.10gb": 3, "1g.5gb": 1}),
}

// BenchmarkApply7SliceLayout8GPUs: one Apply of a 7-slice layout on 8 mock A100s (destroy the
// previous instances, place and create the new GPU and compute instances), in memory and
// through the state file the node's programs share.
func BenchmarkApply7SliceLayout8GPUs(b *testing.B) {
	for _, shared := range []bool{false, true} {
		name := "memory"
		var opts []gpumock.Option
		if shared {
			name = "statefile"
			opts = append(opts, gpumock.WithMIGStateFile(filepath.Join(b.TempDir(), "mig.json")))
		}
		b.Run(name, func(b *testing.B) {
			m, err := gpumock.New("dgxa100", opts...)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if _, err := Apply(m, sevenSlices[i%2], nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkMIGChangeToDevicesListed: the agent's process applies a 7-slice layout; the
// device plugin's process (another mock on the same state file) enumerates the node and
// builds its mixed-strategy resources with every new MIG device. The kubelet, the gates and
// the device plugin pod's restart are not in it (see BENCHMARKS.md).
func BenchmarkMIGChangeToDevicesListed(b *testing.B) {
	file := filepath.Join(b.TempDir(), "mig.json")
	agent, err := gpumock.New("dgxa100", gpumock.WithMIGStateFile(file))
	if err != nil {
		b.Fatal(err)
	}
	plugin, err := gpumock.New("dgxa100", gpumock.WithMIGStateFile(file))
	if err != nil {
		b.Fatal(err)
	}
	cfg := config.DevicePlugin{ResourceName: config.DefaultResourceName, MIGStrategy: config.MIGMixed}
	cfg.Sharing.TimeSlicing.Replicas = 1
	want := [2]int{56, 32} // MIG devices of each layout on 8 GPUs
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := Apply(agent, sevenSlices[i%2], nil); err != nil {
			b.Fatal(err)
		}
		gpus, _, err := devices.Enumerate(plugin, "")
		if err != nil {
			b.Fatal(err)
		}
		res, err := devices.Resources(gpus, cfg)
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for _, r := range res {
			if r.MIG {
				n += len(r.Devices)
			}
		}
		if n != want[i%2] {
			b.Fatalf("the device plugin lists %d MIG devices, want %d", n, want[i%2])
		}
	}
}
