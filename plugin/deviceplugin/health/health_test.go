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
	updates, expect := watchUpdates(t, mon)
	if len(updates) != 0 {
		t.Fatalf("updates at start from healthy GPUs: %v", <-updates)
	}
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

// watchUpdates takes the monitor's first readings (Start), runs it until the test ends, and
// returns its updates with a helper that expects the next one.
func watchUpdates(t *testing.T, mon *health.Monitor) (chan health.Update, func(uuid string, healthy bool, reason string)) {
	t.Helper()
	updates := make(chan health.Update, 64)
	report := func(u health.Update) { updates <- u }
	mon.Start(report)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { mon.Run(ctx, report); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return updates, func(uuid string, healthy bool, reason string) {
		t.Helper()
		select {
		case u := <-updates:
			if u.UUID != uuid || u.Healthy != healthy || !strings.Contains(u.Reason, reason) {
				t.Fatalf("update %+v, want %s healthy=%v (%s)", u, uuid, healthy, reason)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("no update for %s within 30s (want healthy=%v, %s)", uuid, healthy, reason)
		}
	}
}

// Errors the driver counted before the monitor started are not a baseline: the volatile count
// is zero at driver load, so the GPU is Unhealthy from the first reading, during Start (before
// the caller advertises anything), and recovers by the usual rule while the count stays put.
func TestECCErrorsBeforeStartMarkUnhealthy(t *testing.T) {
	m, gpus := mockGPUs(t)
	if err := m.AddDoubleBitErrors(2, 5); err != nil {
		t.Fatal(err)
	}
	mon := health.New(m, gpus, health.Options{RecoveryPeriod: 100 * time.Millisecond, ProbeInterval: 5 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)})
	var atStart []health.Update
	mon.Start(func(u health.Update) { atStart = append(atStart, u) })
	if len(atStart) != 1 || atStart[0].UUID != gpus[2].UUID || atStart[0].Healthy ||
		atStart[0].Reason != "5 uncorrected ECC errors since the driver loaded" {
		t.Fatalf("updates during Start: %+v, want GPU 2 unhealthy with 5 errors since the driver loaded", atStart)
	}
	_, expect := watchUpdates(t, mon) // Start again is a no-op: no second report
	expect(gpus[2].UUID, true, "sane for 100ms")
}

// An event NVML raises after Start and before Run reads the set is not lost: Start is the
// point from which a caller may advertise devices.
func TestEventBetweenStartAndRunIsSeen(t *testing.T) {
	m, gpus := mockGPUs(t)
	mon := health.New(m, gpus, health.Options{RecoveryPeriod: time.Hour, ProbeInterval: time.Hour,
		Logger: slog.New(slog.DiscardHandler)})
	updates := make(chan health.Update, 64)
	report := func(u health.Update) { updates <- u }
	mon.Start(report)
	if n, err := m.InjectXID(3, 48); err != nil || n != 1 {
		t.Fatalf("inject after Start reached %d event sets (%v), want the monitor's one", n, err)
	}
	if err := m.AddDoubleBitErrors(6, 1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { mon.Run(ctx, report); close(done) }()
	defer func() { cancel(); <-done }()
	bad := map[string]string{}
	for len(bad) < 2 {
		select {
		case u := <-updates:
			bad[u.UUID] = u.Reason
		case <-time.After(30 * time.Second):
			t.Fatalf("within 30s only %v", bad)
		}
	}
	if bad[gpus[3].UUID] != "critical XID 48" || bad[gpus[6].UUID] != "double-bit ECC error" {
		t.Fatalf("updates %v, want GPU 3 XID 48 and GPU 6 double-bit ECC", bad)
	}
}

// The recovery period is counted from the last bad signal, on the monitor's clock: with the GPU
// answering again, probes at period-1ms leave it Unhealthy and the first probe at the period
// brings it back. A test clock makes this exact whatever the machine's load: each step waits
// for a probe that read the step's time, not for wall time to pass.
func TestRecoveryWaitsForThePeriod(t *testing.T) {
	m, gpus := mockGPUs(t)
	t0 := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	var clock, lastRead atomic.Int64 // offsets from t0
	// probes receives, for every probe of GPU 0 that it answered, the time that probe read.
	probes := make(chan time.Duration, 1024)
	dev := m.Devices[0].(*nvmlserver.Device)
	query := dev.GetMemoryInfoFunc
	dev.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		mem, ret := query()
		if ret == nvml.SUCCESS {
			select {
			case probes <- time.Duration(lastRead.Load()):
			default:
			}
		}
		return mem, ret
	}
	const period = 300 * time.Millisecond
	mon := health.New(m, gpus, health.Options{RecoveryPeriod: period, ProbeInterval: time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	health.SetClock(mon, func() time.Time { d := clock.Load(); lastRead.Store(d); return t0.Add(time.Duration(d)) })
	// probeAt sets the clock and returns once a probe that read it has finished.
	probeAt := func(d time.Duration) {
		t.Helper()
		clock.Store(int64(d))
		for read := false; ; {
			select {
			case r := <-probes:
				if read { // the probe after the one that read d: that one is done
					return
				}
				read = r == d
			case <-time.After(30 * time.Second):
				t.Fatalf("no probe of GPU 0 at t0+%s within 30s", d)
			}
		}
	}
	updates, expect := watchUpdates(t, mon)
	if err := m.SetLost(0, true); err != nil {
		t.Fatal(err)
	}
	expect(gpus[0].UUID, false, "not answering")
	if err := m.SetLost(0, false); err != nil {
		t.Fatal(err)
	}
	probeAt(0) // the last bad signal is at t0: every probe while lost read t0
	probeAt(period - time.Millisecond)
	select {
	case u := <-updates:
		t.Fatalf("update %+v at t0+%s, before the %s recovery period", u, period-time.Millisecond, period)
	default:
	}
	clock.Store(int64(period))
	expect(gpus[0].UUID, true, "sane for 300ms")
}

// mockGPUs is the dgxa100 mock and its enumerated GPUs.
func mockGPUs(t *testing.T) (*gpumock.Mock, []devices.GPU) {
	t.Helper()
	m, err := gpumock.New("dgxa100")
	if err != nil {
		t.Fatal(err)
	}
	gpus, _, err := devices.Enumerate(m, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return m, gpus
}
