package gpulib

// The one NVML event loop of the node programs. The device plugin's health monitor (XID and
// double-bit ECC → Unhealthy) and the exporter's XID counters both consume it, so both
// register, wait, back off and shut down the same way.

import (
	"context"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// EventFailure is an NVML call of NewEventWatcher that failed.
type EventFailure struct {
	Call   string // NVML's C name: nvmlEventSetCreate or nvmlDeviceRegisterEvents
	Device int    // index into the devices given to NewEventWatcher; -1 for the event set itself
	Ret    nvml.Return
}

// EventWatcher waits on one NVML event set for the GPUs registered with it.
type EventWatcher struct {
	set        nvml.EventSet
	timeout    time.Duration
	registered int
}

// NewEventWatcher creates an event set and registers each of devs (nil entries, GPUs without a
// handle, are skipped) for the event types in want that it supports, or for all of want when
// it cannot say. It also returns the calls that failed. The watcher is nil when no device is
// registered, since no event could arrive; the set is freed then.
//
// waitTimeout bounds one wait, and so how long Run takes to return once its context ends; it is
// also the pause after a wait that failed. NVML counts it in whole milliseconds, and a zero
// wait returns at once, so it is at least 1 ms.
func NewEventWatcher(lib nvml.Interface, devs []nvml.Device, want uint64, waitTimeout time.Duration) (*EventWatcher, []EventFailure) {
	set, ret := lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		return nil, []EventFailure{{Call: "nvmlEventSetCreate", Device: -1, Ret: ret}}
	}
	w := &EventWatcher{set: set, timeout: max(waitTimeout, time.Millisecond)}
	var failed []EventFailure
	for i, dev := range devs {
		if dev == nil {
			continue
		}
		mask := want
		if supported, ret := dev.GetSupportedEventTypes(); ret == nvml.SUCCESS {
			mask &= supported
		}
		if mask == 0 {
			continue
		}
		if ret := dev.RegisterEvents(mask, set); ret != nvml.SUCCESS {
			failed = append(failed, EventFailure{Call: "nvmlDeviceRegisterEvents", Device: i, Ret: ret})
			continue
		}
		w.registered++
	}
	if w.registered == 0 {
		set.Free()
		return nil, failed
	}
	return w, failed
}

// Registered is how many devices the watcher receives events for.
func (w *EventWatcher) Registered() int { return w.registered }

// Run waits for events until ctx ends, then frees the event set. It calls handle on its own
// goroutine with each event (ret SUCCESS) and with each wait that failed: ERROR_GPU_IS_LOST
// when a GPU fell off the bus (NVML does not say which, so ev is zero and the consumer's own
// queries must find it), any other error when the set itself is broken. A wait that failed
// answers again at once, so after each one Run pauses for the wait timeout instead of spinning.
func (w *EventWatcher) Run(ctx context.Context, handle func(ev nvml.EventData, ret nvml.Return)) {
	defer w.set.Free()
	ms := uint32(w.timeout / time.Millisecond)
	for ctx.Err() == nil {
		ev, ret := w.set.Wait(ms)
		switch ret {
		case nvml.SUCCESS:
			handle(ev, ret)
			continue
		case nvml.ERROR_TIMEOUT:
			continue
		}
		handle(nvml.EventData{}, ret)
		select {
		case <-ctx.Done():
		case <-time.After(w.timeout):
		}
	}
}
