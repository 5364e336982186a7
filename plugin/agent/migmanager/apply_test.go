package migmanager

import (
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpupolicy/gpupolicy/plugin/gpulib"
	"github.com/gpupolicy/gpupolicy/plugin/gpulib/gpumock"
	"github.com/gpupolicy/gpupolicy/plugin/mig"
)

func newMock(t testing.TB) *gpumock.Mock {
	t.Helper()
	m, err := gpumock.New("dgxa100")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func all(migEnabled bool, profiles map[string]int) []mig.DeviceConfig {
	return []mig.DeviceConfig{{Devices: mig.Devices{All: true}, MigEnabled: migEnabled, MigDevices: profiles}}
}

// readBack counts GPU i's GPU instances by profile name, with the MIG devices NVML lists.
func readBack(t *testing.T, lib nvml.Interface, i int) (map[string]int, []string) {
	t.Helper()
	dev, _ := lib.DeviceGetHandleByIndex(i)
	st, err := readGPU(i, dev)
	if err != nil {
		t.Fatal(err)
	}
	if st.partial {
		t.Errorf("GPU %d has a GPU instance without one spanning compute instance", i)
	}
	var uuids []string
	n, _ := dev.GetMaxMigDeviceCount()
	for k := range n {
		md, ret := dev.GetMigDeviceHandleByIndex(k)
		if ret != nvml.SUCCESS {
			break
		}
		u, _ := md.GetUUID()
		uuids = append(uuids, u)
	}
	return st.counts, uuids
}

// Every profile of the mock's model (A100 40GB in the table) at its full count, and mixed
// layouts, are applied on all 8 GPUs and read back from NVML; a second apply changes nothing.
func TestApplyEveryLayoutOfTheTable(t *testing.T) {
	product := mig.Products["NVIDIA-A100-SXM4-40GB"]
	layouts := []map[string]int{
		{"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1},
		{"4g.20gb": 1, "3g.20gb": 1},
		{"1g.10gb": 2, "1g.5gb": 3},
	}
	for _, p := range product.Profiles {
		layouts = append(layouts, map[string]int{p.Name: p.Max})
	}
	m := newMock(t)
	for _, want := range layouts {
		changes, err := Apply(m, all(true, want), nil)
		if err != nil {
			t.Fatalf("%v: %v", want, err)
		}
		if len(changes) != 8 || !changes[0].Changed {
			t.Fatalf("%v: changes %+v", want, changes)
		}
		got, uuids := readBack(t, m, 7)
		if !maps.Equal(got, want) {
			t.Fatalf("applied %v, NVML reports %v", want, got)
		}
		total := 0
		for _, n := range want {
			total += n
		}
		if len(uuids) != total {
			t.Errorf("%v: %d MIG devices", want, len(uuids))
		}
		again, err := Apply(m, all(true, want), nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range again {
			if c.Changed {
				t.Fatalf("%v: second apply changed GPU %d", want, c.GPU)
			}
		}
		if _, after := readBack(t, m, 7); !slicesEqual(after, uuids) {
			t.Errorf("%v: a second apply changed the MIG devices: %v → %v", want, uuids, after)
		}
	}
	// Back to whole GPUs.
	if _, err := Apply(m, all(false, nil), nil); err != nil {
		t.Fatal(err)
	}
	dev, _ := m.DeviceGetHandleByIndex(0)
	if mode, _, _ := dev.GetMigMode(); mode != nvml.DEVICE_MIG_DISABLE {
		t.Errorf("MIG mode %d after migEnabled: false", mode)
	}
}

func slicesEqual(a, b []string) bool { return strings.Join(a, ",") == strings.Join(b, ",") }

// Entries by GPU index: GPUs outside the layout are left alone.
func TestApplyByIndex(t *testing.T) {
	m := newMock(t)
	layout := []mig.DeviceConfig{
		{Devices: mig.Devices{Indexes: []int{0, 1}}, MigEnabled: true, MigDevices: map[string]int{"3g.20gb": 2}},
		{Devices: mig.Devices{Indexes: []int{2}}, MigEnabled: false},
	}
	changes, err := Apply(m, layout, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(changes) != 3 {
		t.Fatalf("changes %+v", changes)
	}
	if got, _ := readBack(t, m, 1); got["3g.20gb"] != 2 {
		t.Errorf("GPU 1: %v", got)
	}
	if got, _ := readBack(t, m, 3); len(got) != 0 {
		t.Errorf("GPU 3 (not in the layout) changed: %v", got)
	}
	if _, err := Apply(m, []mig.DeviceConfig{{Devices: mig.Devices{Indexes: []int{9}}}}, nil); err == nil || !strings.Contains(err.Error(), "names GPU 9, but this node has 8 GPUs") {
		t.Errorf("GPU 9: %v", err)
	}
}

// Impossible layouts are refused with the reason, NVML's errors in words.
func TestApplyRefusesImpossibleLayouts(t *testing.T) {
	m := newMock(t)
	for layout, want := range map[string]map[string]int{
		"takes 10 compute slices":                       {"4g.20gb": 1, "3g.20gb": 2},
		"profile 1g.10gb+me does not exist on this GPU": {"1g.10gb+me": 1},
		"more than the 2 instances of 3g.20gb":          {"3g.20gb": 3},
	} {
		if _, err := Apply(m, all(true, want), nil); err == nil || !strings.Contains(err.Error(), layout) {
			t.Errorf("%v: %v, want %q", want, err, layout)
		}
	}
	dev, _ := m.DeviceGetHandleByIndex(0)
	dev.(*server.Device).CreateGpuInstanceWithPlacementFunc = func(*nvml.GpuInstanceProfileInfo, *nvml.GpuInstancePlacement) (nvml.GpuInstance, nvml.Return) {
		return nil, nvml.ERROR_NO_PERMISSION
	}
	_, err := Apply(m, all(true, map[string]int{"7g.40gb": 1}), nil)
	var ne *NVMLError
	if !errors.As(err, &ne) || ne.GPU != 0 || !strings.Contains(err.Error(), "CAP_SYS_ADMIN") {
		t.Errorf("NVML's refusal: %v", err)
	}
}

// A GPU that pods hold is not touched; every held GPU is named at once.
func TestApplyRefusesHeldGPUs(t *testing.T) {
	m := newMock(t)
	held := Holders{0: {"ml/train-0"}, 5: {"ml/a", "ml/b"}}
	_, err := Apply(m, all(true, map[string]int{"1g.5gb": 7}), held)
	var be *BusyError
	if !errors.As(err, &be) || !strings.Contains(err.Error(), "GPU 0 by ml/train-0; GPU 5 by ml/a, ml/b") {
		t.Fatalf("held GPUs: %v", err)
	}
	if got, _ := readBack(t, m, 1); len(got) != 0 {
		t.Errorf("GPU 1 changed although the layout was refused: %v", got)
	}
	// Once in place, a held GPU is no obstacle: nothing changes on it.
	if _, err := Apply(m, all(true, map[string]int{"1g.5gb": 7}), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(m, all(true, map[string]int{"1g.5gb": 7}), held); err != nil {
		t.Errorf("an applied layout with held GPUs: %v", err)
	}
}

// A MIG mode change that needs a reset is reported and not asked again.
func TestApplyReportsResetAndDoesNotLoop(t *testing.T) {
	m := newMock(t)
	if err := m.RequireResetForMIG(0, true); err != nil {
		t.Fatal(err)
	}
	dev, _ := m.DeviceGetHandleByIndex(0)
	sd := dev.(*server.Device)
	calls := 0
	prev := sd.SetMigModeFunc
	sd.SetMigModeFunc = func(mode int) (nvml.Return, nvml.Return) { calls++; return prev(mode) }
	layout := all(true, map[string]int{"2g.10gb": 3})
	for range 2 {
		_, err := Apply(m, layout, nil)
		var re *ResetError
		if !errors.As(err, &re) || len(re.GPUs) != 1 || re.GPUs[0] != 0 || !strings.Contains(err.Error(), "reset") {
			t.Fatalf("want a reset for GPU 0, got %v", err)
		}
	}
	if calls != 1 {
		t.Errorf("SetMigMode called %d times; a pending change must not be asked again", calls)
	}
	if err := m.ResetGPU(0); err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(m, layout, nil); err != nil {
		t.Fatalf("after the reset: %v", err)
	}
	if got, _ := readBack(t, m, 0); got["2g.10gb"] != 3 {
		t.Errorf("GPU 0 after the reset: %v", got)
	}
}

// The mock's profile names are the table's (the agent matches layouts to NVML by name).
func TestMockProfilesAreTheTables(t *testing.T) {
	m := newMock(t)
	dev, _ := m.DeviceGetHandleByIndex(0)
	st, err := readGPU(0, dev)
	if err != nil {
		t.Fatal(err)
	}
	product := mig.Products["NVIDIA-A100-SXM4-40GB"]
	for _, p := range product.Profiles {
		got, ok := st.infos[p.Name]
		if !ok {
			t.Errorf("NVML has no profile %s (has %v)", p.Name, maps.Keys(st.infos))
			continue
		}
		if int(got.InstanceCount) != p.Max || int(got.SliceCount) != p.Compute || gpulib.GPUInstanceProfileName(got) != p.Name {
			t.Errorf("%s: NVML %+v, table %+v", p.Name, got, p)
		}
	}
}
