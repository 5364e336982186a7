// Package health decides whether each GPU and MIG device is Healthy, from NVML events (critical
// XID errors, double-bit ECC errors) and periodic probes (does the GPU still answer, did its
// uncorrected ECC count rise), and lets devices recover.
//
// The rule: a device is marked Unhealthy at once on a bad signal — a critical XID not in the
// ignored list, a double-bit ECC event, a rise of its volatile uncorrected ECC count, or a query
// NVML cannot answer. It is Healthy again when RecoveryPeriod has passed since its last bad
// signal and the latest probe succeeded. A GPU that keeps failing keeps refreshing its last bad
// signal and so stays Unhealthy; one that had a single transient XID comes back on its own,
// unlike NVIDIA's plugin, where an Unhealthy device stays so until the plugin restarts.
//
// No fault may fall between the plugin's start and its first reading: Start registers the event
// set and takes the first probe before the caller advertises a device, and the volatile count
// starts at zero when the driver loads, so a count above zero at start is a rise the plugin was
// not there to see (DCGM's memory health watch likewise fails a GPU with volatile double-bit
// errors). An XID raised before Start cannot be read back from NVML; that one is gone.
package health

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/deviceplugin/devices"
	"github.com/gpupolicy/gpupolicy/plugin/gpulib"
)

// Defaults for Options fields left zero; RecoveryPeriod's is config.DefaultRecoveryPeriod, the
// device plugin contract's, because the rendered config can leave it empty.
const (
	DefaultProbeInterval = 5 * time.Second
	DefaultWaitTimeout   = time.Second
)

// noInstance is NVML's GPU/compute instance id meaning "the whole GPU" in event data.
const noInstance = ^uint32(0)

// Options tune the monitor.
type Options struct {
	IgnoredXIDs    []uint64
	RecoveryPeriod time.Duration
	ProbeInterval  time.Duration
	// WaitTimeout bounds one blocking NVML event wait, and so how long shutdown can take.
	WaitTimeout time.Duration
	Logger      *slog.Logger
}

// Update reports a change of one device's health.
type Update struct {
	UUID    string
	Healthy bool
	Reason  string
}

type deviceState struct {
	healthy bool
	lastBad time.Time
}

// Monitor watches the health of a node's GPUs and their MIG devices.
type Monitor struct {
	lib     nvml.Interface
	gpus    []devices.GPU
	opts    Options
	ignored map[uint64]bool
	state   map[string]*deviceState
	ecc     map[string]uint64
	log     *slog.Logger

	started bool
	watcher *gpulib.EventWatcher // nil when NVML delivers no event
	now     func() time.Time     // time.Now; a test's clock decides when recovery is due
}

// New returns a monitor for gpus; every device starts Healthy.
func New(lib nvml.Interface, gpus []devices.GPU, opts Options) *Monitor {
	if opts.RecoveryPeriod <= 0 {
		opts.RecoveryPeriod = config.DefaultRecoveryPeriod
	}
	if opts.ProbeInterval <= 0 {
		opts.ProbeInterval = DefaultProbeInterval
	}
	if opts.WaitTimeout <= 0 {
		opts.WaitTimeout = DefaultWaitTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	m := &Monitor{lib: lib, gpus: gpus, opts: opts, ignored: map[uint64]bool{}, state: map[string]*deviceState{},
		ecc: map[string]uint64{}, log: opts.Logger, now: time.Now}
	for _, x := range opts.IgnoredXIDs {
		m.ignored[x] = true
	}
	for _, g := range gpus {
		m.state[g.UUID] = &deviceState{healthy: true}
		for _, mig := range g.MIG {
			m.state[mig.UUID] = &deviceState{healthy: true}
		}
	}
	return m
}

// Start registers the NVML event set and takes the first probe of every GPU, calling report for
// each device that is bad already. From its return on no event is lost (NVML queues them in the
// set until Run reads them), so call it before any device is advertised. Run must follow, since
// it frees the event set.
func (m *Monitor) Start(report func(Update)) {
	if m.started {
		return
	}
	m.started = true
	m.watcher = m.watchEvents()
	m.probe(m.now(), report)
}

// Run watches until ctx ends, calling report for every change of a device's health; it calls
// Start first when the caller did not. report runs on Run's goroutine; it must not block for long.
func (m *Monitor) Run(ctx context.Context, report func(Update)) {
	m.Start(report)
	events := make(chan nvml.EventData, 64)
	if w := m.watcher; w != nil {
		done := make(chan struct{})
		go func() {
			defer close(done)
			w.Run(ctx, func(ev nvml.EventData, ret nvml.Return) { m.forwardEvent(ctx, ev, ret, events) })
		}()
		defer func() { <-done }()
	}
	ticker := time.NewTicker(m.opts.ProbeInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-events:
			m.handleEvent(ev, m.now(), report)
		case <-ticker.C:
			m.probe(m.now(), report)
		}
	}
}

// watchEvents registers every GPU for its critical events; nil when NVML delivers none, in
// which case health rests on the probes.
func (m *Monitor) watchEvents() *gpulib.EventWatcher {
	handles := make([]nvml.Device, len(m.gpus))
	for i, g := range m.gpus {
		handles[i] = g.Handle
	}
	w, failed := gpulib.NewEventWatcher(m.lib, handles, nvml.EventTypeXidCriticalError|nvml.EventTypeDoubleBitEccError, m.opts.WaitTimeout)
	for _, f := range failed {
		if f.Device < 0 {
			m.log.Warn("NVML event set unavailable; health relies on probes only", "error", nvml.ErrorString(f.Ret))
		} else {
			m.log.Warn("GPU events unavailable; its health relies on probes only", "gpu", m.gpus[f.Device].UUID, "error", nvml.ErrorString(f.Ret))
		}
	}
	return w
}

// forwardEvent hands one report of the event watcher to Run's goroutine, which owns the state.
func (m *Monitor) forwardEvent(ctx context.Context, ev nvml.EventData, ret nvml.Return, out chan<- nvml.EventData) {
	switch ret {
	case nvml.SUCCESS:
	case nvml.ERROR_GPU_IS_LOST:
		// NVML cannot say which GPU; the probes find it, the others recover after the period.
		ev = nvml.EventData{EventType: nvml.EventTypeXidCriticalError, EventData: 79}
	default:
		m.log.Warn("NVML event wait failed", "error", nvml.ErrorString(ret))
		return
	}
	select {
	case out <- ev:
	case <-ctx.Done():
	}
}

func (m *Monitor) handleEvent(ev nvml.EventData, now time.Time, report func(Update)) {
	var reason string
	switch {
	case ev.EventType&nvml.EventTypeXidCriticalError != 0:
		if m.ignored[ev.EventData] {
			m.log.Info("ignored XID", "xid", ev.EventData)
			return
		}
		reason = fmt.Sprintf("critical XID %d", ev.EventData)
	case ev.EventType&nvml.EventTypeDoubleBitEccError != 0:
		reason = "double-bit ECC error"
	default:
		return
	}
	for _, uuid := range m.affected(ev) {
		m.markBad(uuid, now, reason, report)
	}
}

// affected lists the device UUIDs an event concerns: one MIG device when the event names its
// instance, else the GPU with all its MIG devices; every GPU when the event has no device.
func (m *Monitor) affected(ev nvml.EventData) []string {
	var uuid string
	if ev.Device != nil {
		uuid, _ = ev.Device.GetUUID()
	}
	var out []string
	for _, g := range m.gpus {
		if uuid != "" && g.UUID != uuid {
			continue
		}
		if uuid != "" && ev.GpuInstanceId != noInstance && len(g.MIG) > 0 {
			for _, mig := range g.MIG {
				if uint32(mig.GIID) == ev.GpuInstanceId && (ev.ComputeInstanceId == noInstance || uint32(mig.CIID) == ev.ComputeInstanceId) {
					out = append(out, mig.UUID)
				}
			}
			if len(out) > 0 {
				return out
			}
		}
		out = append(out, withMIG(g)...)
	}
	return out
}

func withMIG(g devices.GPU) []string {
	out := []string{g.UUID}
	for _, mig := range g.MIG {
		out = append(out, mig.UUID)
	}
	return out
}

func (m *Monitor) markBad(uuid string, now time.Time, reason string, report func(Update)) {
	s := m.state[uuid]
	if s == nil {
		return
	}
	s.lastBad = now
	if s.healthy {
		s.healthy = false
		m.log.Warn("device unhealthy", "device", uuid, "reason", reason)
		report(Update{UUID: uuid, Healthy: false, Reason: reason})
	}
}

// probe asks every GPU whether it still answers and whether its uncorrected ECC count rose,
// then brings back the devices whose last bad signal is older than the recovery period.
func (m *Monitor) probe(now time.Time, report func(Update)) {
	for _, g := range m.gpus {
		if reason := m.probeGPU(g); reason != "" {
			for _, uuid := range withMIG(g) {
				m.markBad(uuid, now, reason, report)
			}
		}
	}
	for _, g := range m.gpus {
		for _, uuid := range withMIG(g) {
			s := m.state[uuid]
			if !s.healthy && now.Sub(s.lastBad) >= m.opts.RecoveryPeriod {
				s.healthy = true
				reason := fmt.Sprintf("NVML reports it sane for %s", m.opts.RecoveryPeriod)
				m.log.Info("device healthy again", "device", uuid, "reason", reason)
				report(Update{UUID: uuid, Healthy: true, Reason: reason})
			}
		}
	}
}

// probeGPU returns why g is not sane, or "".
func (m *Monitor) probeGPU(g devices.GPU) string {
	if _, ret := g.Handle.GetMemoryInfo(); ret != nvml.SUCCESS {
		if gone(ret) {
			return "not answering: " + nvml.ErrorString(ret)
		}
		m.log.Debug("probe query refused", "device", g.UUID, "error", nvml.ErrorString(ret))
	}
	count, ret := g.Handle.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC)
	switch {
	case ret == nvml.SUCCESS:
		// The volatile count is zero when the driver loads: at the first reading, any count
		// rose while nobody watched.
		last, seen := m.ecc[g.UUID]
		m.ecc[g.UUID] = count
		switch {
		case !seen && count > 0:
			return fmt.Sprintf("%d uncorrected ECC errors since the driver loaded", count)
		case count > last:
			return fmt.Sprintf("uncorrected ECC errors rose from %d to %d", last, count)
		}
	case gone(ret):
		return "not answering: " + nvml.ErrorString(ret)
	}
	// Anything else (ECC off, not supported, no permission) says nothing about the GPU.
	return ""
}

// gone reports whether an NVML error means the GPU itself is not working, as opposed to a
// query this GPU or driver does not offer.
func gone(ret nvml.Return) bool {
	switch ret {
	case nvml.ERROR_GPU_IS_LOST, nvml.ERROR_RESET_REQUIRED, nvml.ERROR_TIMEOUT, nvml.ERROR_UNKNOWN, nvml.ERROR_IRQ_ISSUE:
		return true
	}
	return false
}
