package gpulib

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpupolicy/gpupolicy/plugin/gpulib/gpumock"
)

func devicesOf(t *testing.T, m *gpumock.Mock) []nvml.Device {
	t.Helper()
	var out []nvml.Device
	for i := range 8 {
		d, ret := m.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			t.Fatal(ret)
		}
		out = append(out, d)
	}
	return out
}

// Each GPU is registered for the wanted types it supports; one without a handle (nil), one that
// supports none of them and one that refuses registration are left out, and the refusal is told.
func TestEventWatcherRegistersWhatEachGPUSupports(t *testing.T) {
	m, err := gpumock.New("dgxa100")
	if err != nil {
		t.Fatal(err)
	}
	devs := devicesOf(t, m)
	m.Devices[1].(*server.Device).GetSupportedEventTypesFunc = func() (uint64, nvml.Return) {
		return nvml.EventTypeSingleBitEccError, nvml.SUCCESS
	}
	m.Devices[2].(*server.Device).RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.ERROR_NO_PERMISSION }
	devs[3] = nil
	w, failed := NewEventWatcher(m, devs, nvml.EventTypeXidCriticalError, 10*time.Millisecond)
	if w == nil || w.Registered() != 5 {
		t.Fatalf("watcher %+v, want 5 GPUs registered", w)
	}
	if len(failed) != 1 || failed[0] != (EventFailure{Call: "nvmlDeviceRegisterEvents", Device: 2, Ret: nvml.ERROR_NO_PERMISSION}) {
		t.Fatalf("failures %+v", failed)
	}
	for _, c := range []struct{ gpu, sets int }{{0, 1}, {1, 0}, {2, 0}, {4, 1}} {
		if n, _ := m.InjectXID(c.gpu, 79); n != c.sets {
			t.Errorf("XID on GPU %d reached %d sets, want %d", c.gpu, n, c.sets)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan nvml.EventData, 8)
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.Run(ctx, func(ev nvml.EventData, ret nvml.Return) {
			if ret != nvml.SUCCESS {
				t.Errorf("wait failed: %v", ret)
			}
			got <- ev
		})
	}()
	for _, gpu := range []int{0, 4} {
		select {
		case ev := <-got:
			if ev.EventData != 79 || ev.Device != devs[gpu] {
				t.Errorf("event %+v, want XID 79 of GPU %d", ev, gpu)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no event for GPU %d", gpu)
		}
	}
	cancel()
	<-done
	if n, _ := m.InjectXID(0, 79); n != 0 {
		t.Errorf("the event set is still registered after Run returned (%d sets)", n)
	}
}

func TestEventWatcherWithoutEvents(t *testing.T) {
	m, err := gpumock.New("dgxa100")
	if err != nil {
		t.Fatal(err)
	}
	devs := devicesOf(t, m)
	if w, failed := NewEventWatcher(m, devs, nvml.EventTypeClock, time.Millisecond); w != nil || len(failed) != 0 {
		t.Errorf("no GPU supports the type: watcher %v, failures %+v", w, failed)
	}
	m.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return nil, nvml.ERROR_NOT_SUPPORTED }
	w, failed := NewEventWatcher(m, devs, nvml.EventTypeXidCriticalError, time.Millisecond)
	if w != nil || len(failed) != 1 || failed[0] != (EventFailure{Call: "nvmlEventSetCreate", Device: -1, Ret: nvml.ERROR_NOT_SUPPORTED}) {
		t.Errorf("no event set: watcher %v, failures %+v", w, failed)
	}
}

// A wait that says a GPU is lost answers again at once: the consumer hears of it, and the
// watcher pauses one wait timeout before it asks again instead of spinning; it stops on cancel
// and frees the set.
func TestEventWatcherReportsLostGPUWithoutSpinning(t *testing.T) {
	m, err := gpumock.New("dgxa100")
	if err != nil {
		t.Fatal(err)
	}
	var waits, frees atomic.Int32
	set := &mock.EventSet{
		WaitFunc: func(uint32) (nvml.EventData, nvml.Return) {
			waits.Add(1)
			return nvml.EventData{}, nvml.ERROR_GPU_IS_LOST
		},
		FreeFunc: func() nvml.Return { frees.Add(1); return nvml.SUCCESS },
	}
	m.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return set, nvml.SUCCESS }
	m.Devices[0].(*server.Device).RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS }
	w, _ := NewEventWatcher(m, devicesOf(t, m)[:1], nvml.EventTypeXidCriticalError, 20*time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var rets []nvml.Return
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		w.Run(ctx, func(ev nvml.EventData, ret nvml.Return) {
			mu.Lock()
			defer mu.Unlock()
			if ev != (nvml.EventData{}) {
				t.Errorf("lost GPU came with event data %+v", ev)
			}
			rets = append(rets, ret)
		})
	}()
	// Several failed waits, each followed by the pause; then the count must fit the time spent.
	for deadline := time.Now().Add(30 * time.Second); waits.Load() < 4; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d event waits within 30s, want 4", waits.Load())
		}
	}
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not stop within 30s of cancel")
	}
	mu.Lock()
	defer mu.Unlock()
	if n, most := waits.Load(), int32(time.Since(start)/(20*time.Millisecond))+2; n < 2 || n > most {
		t.Errorf("%d waits in %s with a 20ms pause: want at least 2 and at most %d", n, time.Since(start), most)
	}
	if len(rets) != int(waits.Load()) || rets[0] != nvml.ERROR_GPU_IS_LOST {
		t.Errorf("reported %v for %d waits", rets, waits.Load())
	}
	if frees.Load() != 1 {
		t.Errorf("event set freed %d times", frees.Load())
	}
}
