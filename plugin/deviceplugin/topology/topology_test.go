package topology_test

import (
	"slices"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpupolicy/gpupolicy/plugin/deviceplugin/devices"
	"github.com/gpupolicy/gpupolicy/plugin/deviceplugin/topology"
	"github.com/gpupolicy/gpupolicy/plugin/gpulib/gpumock"
)

func graph(t testing.TB) *topology.Graph { return graphOf(t, "dgxa100") }

func graphOf(t testing.TB, mock string) *topology.Graph {
	m, err := gpumock.New(mock)
	if err != nil {
		t.Fatal(err)
	}
	gpus, _, err := devices.Enumerate(m, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return topology.Build(gpus)
}

func TestDGXA100Graph(t *testing.T) {
	g := graph(t)
	for i := range 8 {
		for j := range 8 {
			if i != j && g.NVLinks[i][j] != 12 {
				t.Fatalf("NVLinks[%d][%d] = %d, want 12 through the NVSwitches", i, j, g.NVLinks[i][j])
			}
		}
	}
	if g.PCIe[0][1] != nvml.TOPOLOGY_MULTIPLE || g.PCIe[0][2] != nvml.TOPOLOGY_NODE || g.PCIe[0][4] != nvml.TOPOLOGY_SYSTEM {
		t.Fatalf("PCIe row 0: %v", g.PCIe[0])
	}
}

func TestDGXH100Graph(t *testing.T) {
	if !slices.Contains(gpumock.Names(), "dgxh100") {
		t.Skip("no dgxh100 mock")
	}
	if g := graphOf(t, "dgxh100"); g.NVLinks[0][7] != 18 {
		t.Fatalf("NVLinks[0][7] = %d, want 18 through the NVSwitches", g.NVLinks[0][7])
	}
}

func TestBest(t *testing.T) {
	g := graph(t)
	all := []int{7, 6, 5, 4, 3, 2, 1, 0}
	for _, tc := range []struct {
		avail, must []int
		size        int
		want        []int
	}{
		{all, nil, 2, []int{0, 1}},
		{all, []int{5}, 2, []int{5, 4}},
		{all, nil, 4, []int{0, 1, 2, 3}},
		{[]int{1, 3, 4, 6}, nil, 2, []int{1, 3}},
		{[]int{0}, nil, 3, []int{0}},
		{all, []int{2, 6}, 2, []int{2, 6}},
	} {
		got := g.Best(tc.avail, tc.must, tc.size)
		if !slices.Equal(got, tc.want) {
			t.Errorf("Best(%v, %v, %d) = %v, want %v", tc.avail, tc.must, tc.size, got, tc.want)
		}
	}
}

func BenchmarkBest(b *testing.B) {
	g := graph(b)
	all := []int{0, 1, 2, 3, 4, 5, 6, 7}
	b.ReportAllocs()
	for b.Loop() {
		g.Best(all, nil, 4)
	}
}
