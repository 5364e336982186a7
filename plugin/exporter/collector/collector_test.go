package collector_test

import (
	"context"
	"io"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"

	"github.com/gpupolicy/gpupolicy/plugin/exporter/collector"
	"github.com/gpupolicy/gpupolicy/plugin/gpulib/gpumock"
)

func newCollector(t *testing.T, mock string, interval time.Duration) (*gpumock.Mock, *collector.Collector) {
	t.Helper()
	m, err := gpumock.New(mock)
	if err != nil {
		t.Fatal(err)
	}
	m.Init()
	c, err := collector.New(m, collector.Config{Interval: interval, Hostname: "n", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return m, c
}

func TestXIDFromEventSetReachesSnapshot(t *testing.T) {
	m, c := newCollector(t, "dgxa100", time.Hour) // only the XID may trigger the second collection
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { c.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()

	// Ready (the exporter's /readyz) means the XID events are registered.
	select {
	case <-c.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("collector not ready within 30s")
	}
	deadline := time.Now().Add(30 * time.Second)
	if n, err := m.InjectXID(2, 79); err != nil || n != 1 {
		t.Fatalf("XID injected once the collector was ready reached %d event sets (%v), want the collector's one", n, err)
	}
	for {
		if s := c.Snapshot(); s != nil && s.GPUs[2].LastXID == 79 {
			if len(s.GPUs[2].XIDs) != 1 || s.GPUs[2].XIDs[0] != (collector.XIDCount{XID: 79, Count: 1}) {
				t.Fatalf("XID counts: %+v", s.GPUs[2].XIDs)
			}
			if s.GPUs[3].LastXID != 0 {
				t.Fatalf("XID leaked to GPU 3: %+v", s.GPUs[3])
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("XID 79 on GPU 2 not in the snapshot within 30s (interval is 1h: the XID must trigger a collection)")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A GPU that falls off the bus makes NVML's event wait answer ERROR_GPU_IS_LOST: the collector
// counts it and publishes the lost GPU's up=0 at once, not at the next interval.
func TestLostGPUFromEventSetReachesSnapshot(t *testing.T) {
	m, c := newCollector(t, "dgxa100", time.Hour) // only the lost GPU may trigger the second collection
	var lost atomic.Bool
	create := m.EventSetCreateFunc
	m.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		set, ret := create()
		s := set.(*mock.EventSet)
		wait := s.WaitFunc
		s.WaitFunc = func(timeoutMs uint32) (nvml.EventData, nvml.Return) {
			if lost.Load() {
				return nvml.EventData{}, nvml.ERROR_GPU_IS_LOST
			}
			return wait(timeoutMs)
		}
		return set, ret
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { c.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()
	select {
	case <-c.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("collector not ready within 30s")
	}
	if err := m.SetLost(5, true); err != nil {
		t.Fatal(err)
	}
	lost.Store(true)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if s := c.Snapshot(); !s.GPUs[5].Up {
			if !s.GPUs[4].Up || !slices.Contains(s.CallErrors, collector.CallError{Call: "nvmlEventSetWait", Error: "ERROR_GPU_IS_LOST", Count: 1}) {
				t.Fatalf("after GPU 5 was lost: GPU 4 up=%v, call errors %+v", s.GPUs[4].Up, s.CallErrors)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("lost GPU 5 not down in the snapshot within 30s (interval is 1h: the lost GPU must trigger a collection)")
		}
	}
}

func TestGPMProfilingOnHopperOnly(t *testing.T) {
	_, a100 := newCollector(t, "dgxa100", time.Hour)
	a100.Collect()
	s := a100.Collect()
	if v := s.GPUs[0].Values[collector.ProfSMActive]; !math.IsNaN(v) {
		t.Errorf("A100 reported GPM SM activity %v", v)
	}
	if len(s.CallErrors) != 0 {
		t.Errorf("unsupported GPM counted as NVML errors: %+v", s.CallErrors)
	}

	m, h100 := newCollector(t, "dgxh100", time.Hour)
	if s := h100.Collect(); !math.IsNaN(s.GPUs[0].Values[collector.ProfSMActive]) {
		t.Error("GPM metrics after one sample; NVML needs two")
	}
	s = h100.Collect()
	for i, g := range s.GPUs {
		v := g.Values[collector.ProfSMActive]
		if math.IsNaN(v) || v < 0 || v > 1 {
			t.Errorf("H100 GPU %d: DCGM_FI_PROF_SM_ACTIVE %v, want a ratio in [0,1]", i, v)
		}
		if math.IsNaN(g.Values[collector.ProfPCIeTxBytes]) {
			t.Errorf("H100 GPU %d: no PCIe TX rate", i)
		}
	}
	// Per GPU instance on a MIG-enabled Hopper.
	if err := m.ConfigureMIG(1, nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.GPU_INSTANCE_PROFILE_2_SLICE); err != nil {
		t.Fatal(err)
	}
	h100.Collect()
	s = h100.Collect()
	if len(s.GPUs[1].MIG) != 2 {
		t.Fatalf("H100 GPU 1: %d MIG devices, want 2", len(s.GPUs[1].MIG))
	}
	for _, mig := range s.GPUs[1].MIG {
		if math.IsNaN(mig.Values[collector.ProfGrEngineActive]) || math.IsNaN(mig.Values[collector.FBUsed]) {
			t.Errorf("MIG %s (%s): missing GPM or framebuffer values", mig.UUID, mig.Profile)
		}
	}
}

func TestMIGDevicesAndProfiles(t *testing.T) {
	m, c := newCollector(t, "dgxa100", time.Hour)
	if err := m.ConfigureMIG(0, nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.GPU_INSTANCE_PROFILE_2_SLICE, nvml.GPU_INSTANCE_PROFILE_3_SLICE); err != nil {
		t.Fatal(err)
	}
	s := c.Collect()
	got := map[string]bool{}
	for _, mig := range s.GPUs[0].MIG {
		got[mig.Profile] = true
		if mig.UUID == "" || mig.Values[collector.FBFree]+mig.Values[collector.FBUsed] <= 0 {
			t.Errorf("MIG %+v: missing UUID or framebuffer", mig)
		}
	}
	for _, p := range []string{"1g.5gb", "2g.10gb", "3g.20gb"} {
		if !got[p] {
			t.Errorf("MIG profile %s missing, got %v", p, got)
		}
	}
	// Reconfiguring (MIG off) removes the MIG devices on the next cycle.
	if err := m.ConfigureMIG(0); err != nil {
		t.Fatal(err)
	}
	if s := c.Collect(); len(s.GPUs[0].MIG) != 0 {
		t.Errorf("MIG devices after MIG was disabled: %+v", s.GPUs[0].MIG)
	}
}

func TestSnapshotIsPublishedAndImmutable(t *testing.T) {
	_, c := newCollector(t, "dgxa100", time.Hour)
	if c.Snapshot() != nil {
		t.Fatal("snapshot before the first collection")
	}
	a := c.Collect()
	b := c.Collect()
	if a == b || b.Seq != a.Seq+1 || c.Snapshot() != b {
		t.Fatalf("snapshots: a.Seq=%d b.Seq=%d", a.Seq, b.Seq)
	}
	if a.GPUs[0].Values[collector.TotalEnergy] >= b.GPUs[0].Values[collector.TotalEnergy] {
		t.Error("energy counter did not grow between snapshots")
	}
}

func TestIntervalMustBePositive(t *testing.T) {
	m, _ := gpumock.New("dgxa100")
	if _, err := collector.New(m, collector.Config{}); err == nil {
		t.Fatal("zero interval accepted")
	}
}

// BenchmarkCollect: one NVML collection of 8 GPUs x 7 MIG devices on the mock (the work done
// every --interval, off the scrape path).
func BenchmarkCollect(b *testing.B) {
	m, err := gpumock.New("dgxa100")
	if err != nil {
		b.Fatal(err)
	}
	m.Init()
	for g := range 8 {
		if err := m.ConfigureMIG(g, slices.Repeat([]int{nvml.GPU_INSTANCE_PROFILE_1_SLICE}, 7)...); err != nil {
			b.Fatal(err)
		}
	}
	c, err := collector.New(m, collector.Config{Interval: time.Hour, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	if s := c.Collect(); len(s.GPUs[7].MIG) != 7 {
		b.Fatalf("GPU 7 has %d MIG devices, want 7", len(s.GPUs[7].MIG))
	}
	b.ReportAllocs()
	for b.Loop() {
		c.Collect()
	}
}

func TestGPUWithoutHandleAtStartIsReportedDown(t *testing.T) {
	m, err := gpumock.New("dgxa100")
	if err != nil {
		t.Fatal(err)
	}
	m.Init()
	byIndex := m.DeviceGetHandleByIndexFunc
	gone := true
	m.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i == 2 && gone {
			return nil, nvml.ERROR_GPU_IS_LOST
		}
		return byIndex(i)
	}
	c, err := collector.New(m, collector.Config{Interval: time.Hour, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	s := c.Collect()
	if len(s.GPUs) != 8 || s.GPUs[2].Up || s.GPUs[2].Index != 2 || s.GPUs[2].LastError == nil || s.GPUs[2].LastError.Error != "ERROR_GPU_IS_LOST" {
		t.Fatalf("GPU 2 without a handle: %+v", s.GPUs[2])
	}
	for i, g := range s.GPUs {
		if i != 2 && (!g.Up || math.IsNaN(g.Values[collector.GPUTemp])) {
			t.Errorf("GPU %d not reporting while GPU 2 is lost", i)
		}
	}
	gone = false
	s = c.Collect()
	if !s.GPUs[2].Up || s.GPUs[2].UUID == "" || math.IsNaN(s.GPUs[2].Values[collector.GPUTemp]) {
		t.Errorf("GPU 2 after its handle came back: %+v", s.GPUs[2])
	}
}
