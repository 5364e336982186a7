package draplugin

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpupolicy/gpupolicy/plugin/gpulib/gpumock"
)

var update = flag.Bool("update", false, "rewrite e2e/testdata/dra/mig-state.json")

// migStateFixture is the mock MIG state e2e's TestDRA gives one node (all 8 GPUs as seven
// 1g.5gb MIG devices each: 56 devices, the publication benchmark's size). The e2e binary must not link NVML, so it cannot make the state itself: this
// test writes it with -update and fails when the mock's format moves away from it.
const migStateFixture = "../../e2e/testdata/dra/mig-state.json"

func TestE2EMIGStateFixture(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.json")
	m, err := gpumock.New("dgxa100", gpumock.WithMIGStateFile(path))
	if err != nil {
		t.Fatal(err)
	}
	m.Init()
	one := nvml.GPU_INSTANCE_PROFILE_1_SLICE
	for gpu := range 8 {
		if err := m.ConfigureMIG(gpu, one, one, one, one, one, one, one); err != nil {
			t.Fatal(err)
		}
	}
	if *update {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(migStateFixture, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fixture, err := gpumock.New("dgxa100", gpumock.WithMIGStateFile(migStateFixture))
	if err != nil {
		t.Fatal(err)
	}
	fixture.Init()
	d := newDriver(t, fixture, "")
	var mig int
	for _, dev := range d.Devices() {
		if dev.Parent != "" {
			mig++
		}
	}
	if mig != 56 || len(d.Devices()) != 56 {
		t.Fatalf("the fixture gives %d MIG devices of %d, want 56 of 56: regenerate with go test ./plugin/draplugin -run Fixture -update", mig, len(d.Devices()))
	}
}
