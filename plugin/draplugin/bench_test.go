package draplugin

import (
	"context"
	"fmt"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/gpupolicy/gpupolicy/plugin/deviceplugin/devices"
	"github.com/gpupolicy/gpupolicy/plugin/gpulib/gpumock"
)

// BenchmarkPrepareUnprepare: one claim of one GPU prepared (its CDI spec written atomically)
// and unprepared again, the plugin's share of a pod start and stop; numbers in BENCHMARKS.md.
func BenchmarkPrepareUnprepare(b *testing.B) {
	d := newDriver(b, nil, b.TempDir())
	ctx := context.Background()
	b.ResetTimer()
	for i := range b.N {
		uid := types.UID(fmt.Sprintf("uid-%d", i))
		res, err := d.PrepareResourceClaims(ctx, []*resourceapi.ResourceClaim{claim(string(uid), "gpu-1")})
		if err != nil || res[uid].Err != nil {
			b.Fatal(err, res[uid].Err)
		}
		if _, err := d.UnprepareResourceClaims(ctx, []kubeletplugin.NamespacedObject{{UID: uid}}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkInventory56: enumerating 8 GPUs × 7 MIG devices (the e2e fixture) and describing
// them for the ResourceSlice.
func BenchmarkInventory56(b *testing.B) {
	m, err := gpumock.New("dgxa100", gpumock.WithMIGStateFile(migStateFixture))
	if err != nil {
		b.Fatal(err)
	}
	m.Init()
	b.ResetTimer()
	for range b.N {
		gpus, _, err := devices.Enumerate(m, b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		if n := len(Inventory(m, gpus, "/nonexistent")); n != 56 {
			b.Fatalf("%d devices", n)
		}
	}
}
