package health_test

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	nvmlserver "github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpupolicy/gpupolicy/plugin/deviceplugin/devices"
	"github.com/gpupolicy/gpupolicy/plugin/deviceplugin/health"
	"github.com/gpupolicy/gpupolicy/plugin/gpulib/gpumock"
)

// Without NVML events (drivers or GPUs that refuse them) the probes still catch a rising
// uncorrected ECC count and a GPU that stops answering, and recovery follows the same rule.
func TestProbesWithoutEvents(t *testing.T) {
	m, err := gpumock.New("dgxa100")
	if err != nil {
		t.Fatal(err)
	}
	m.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED }
	// GPU 1 refuses the ECC query (ECC off, or no permission): that says nothing about its
	// health, so no update may name it (expect below would see it first).
	m.Devices[1].(*nvmlserver.Device).GetTotalEccErrorsFunc = func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) {
		return 0, nvml.ERROR_NO_PERMISSION
	}
	gpus, _, err := devices.Enumerate(m, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	mon := health.New(m, gpus, health.Options{RecoveryPeriod: 100 * time.Millisecond, ProbeInterval: 5 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)})
	updates := make(chan health.Update, 64)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { mon.Run(ctx, func(u health.Update) { updates <- u }); close(done) }()
	defer func() { cancel(); <-done }()

	expect := func(uuid string, healthy bool, reason string) {
		t.Helper()
		select {
		case u := <-updates:
			if u.UUID != uuid || u.Healthy != healthy || !strings.Contains(u.Reason, reason) {
				t.Fatalf("update %+v, want %s healthy=%v (%s)", u, uuid, healthy, reason)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no update for %s", uuid)
		}
	}
	time.Sleep(20 * time.Millisecond) // the first probe records the ECC baseline
	if err := m.AddDoubleBitErrors(4, 3); err != nil {
		t.Fatal(err)
	}
	expect(gpus[4].UUID, false, "uncorrected ECC errors rose from 0 to 3")
	expect(gpus[4].UUID, true, "sane for 100ms")
	if err := m.SetLost(6, true); err != nil {
		t.Fatal(err)
	}
	expect(gpus[6].UUID, false, "not answering")
}

// An event wait that answers ERROR_GPU_IS_LOST does not say which GPU: every device is marked
// as on XID 79 (fallen off the bus), once, and the probes tell the lost one from the others.
func TestLostGPUFromEventWait(t *testing.T) {
	m, err := gpumock.New("dgxa100")
	if err != nil {
		t.Fatal(err)
	}
	var waits atomic.Int32
	create := m.EventSetCreateFunc
	m.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		set, ret := create()
		set.(*mock.EventSet).WaitFunc = func(uint32) (nvml.EventData, nvml.Return) {
			waits.Add(1)
			return nvml.EventData{}, nvml.ERROR_GPU_IS_LOST
		}
		return set, ret
	}
	gpus, _, err := devices.Enumerate(m, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	mon := health.New(m, gpus, health.Options{RecoveryPeriod: time.Hour, ProbeInterval: time.Hour, WaitTimeout: 20 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)})
	updates := make(chan health.Update, 64)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	start := time.Now()
	go func() { mon.Run(ctx, func(u health.Update) { updates <- u }); close(done) }()
	bad := map[string]bool{}
	for len(bad) < len(gpus) {
		select {
		case u := <-updates:
			if u.Healthy || u.Reason != "critical XID 79" {
				t.Fatalf("update %+v, want unhealthy for critical XID 79", u)
			}
			bad[u.UUID] = true
		case <-time.After(5 * time.Second):
			t.Fatalf("%d of %d GPUs marked unhealthy", len(bad), len(gpus))
		}
	}
	time.Sleep(200 * time.Millisecond)
	cancel()
	<-done
	if n, most := waits.Load(), int32(time.Since(start)/(20*time.Millisecond))+2; n > most {
		t.Errorf("%d event waits in %s with a 20ms wait timeout: the lost GPU is spun on", n, time.Since(start))
	}
	select {
	case u := <-updates:
		t.Errorf("a second update %+v: a device is reported once until it recovers", u)
	default:
	}
}
