package collector

import (
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpupolicy/gpupolicy/plugin/gpulib"
)

// xidWaitTimeout bounds one NVML event wait, so the watcher notices shutdown within that time.
const xidWaitTimeout = 500 * time.Millisecond

// registerXIDs registers every GPU that supports it for XID critical-error events; the watcher
// it returns records each XID once run. Without event support (older GPUs, some mocks) it is
// nil and the exporter still runs; DCGM_FI_DEV_XID_ERRORS then stays 0.
func (c *Collector) registerXIDs() *gpulib.EventWatcher {
	handles := make([]nvml.Device, len(c.gpus))
	for i, g := range c.gpus {
		g.xmu.Lock()
		handles[i] = g.dev
		g.xmu.Unlock()
	}
	w, failed := gpulib.NewEventWatcher(c.lib, handles, nvml.EventTypeXidCriticalError, xidWaitTimeout)
	for _, f := range failed {
		c.errs.add(f.Call, f.Ret)
		if f.Device < 0 {
			c.log.Warn("XID events unavailable", "stage", "xid", "error", returnName(f.Ret))
			return nil
		}
		c.log.Warn("XID events not registered", "stage", "xid", "gpu", c.gpus[f.Device].index, "error", returnName(f.Ret))
	}
	registered := 0
	if w != nil {
		registered = w.Registered()
	}
	c.log.Info("watching XID events", "stage", "xid", "gpus", registered)
	return w
}

// handleEvent takes one report of the event watcher: an XID, or a wait that failed.
func (c *Collector) handleEvent(ev nvml.EventData, ret nvml.Return) {
	switch ret {
	case nvml.SUCCESS:
		if ev.EventType&nvml.EventTypeXidCriticalError != 0 {
			c.recordXID(ev)
		}
	case nvml.ERROR_GPU_IS_LOST:
		c.errs.add("nvmlEventSetWait", ret)
		// NVML does not say which GPU; a collection finds it and publishes its up=0 now rather
		// than at the next interval. Once a snapshot shows a GPU down there is nothing to hurry.
		if s := c.Snapshot(); s == nil || allUp(s) {
			c.publishSoon()
		}
	default:
		c.errs.add("nvmlEventSetWait", ret)
	}
}

func allUp(s *Snapshot) bool {
	for _, g := range s.GPUs {
		if !g.Up {
			return false
		}
	}
	return true
}

// publishSoon asks Run for a collection now; one already asked for is enough.
func (c *Collector) publishSoon() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

func (c *Collector) recordXID(ev nvml.EventData) {
	g := c.gpuOf(ev.Device)
	if g == nil {
		c.log.Warn("XID for an unknown device", "stage", "xid", "xid", ev.EventData)
		return
	}
	g.xmu.Lock()
	g.lastXID = ev.EventData
	g.xids[ev.EventData]++
	g.xmu.Unlock()
	c.log.Warn("XID error", "stage", "xid", "gpu", g.index, "xid", ev.EventData)
	c.publishSoon()
}

// gpuOf finds the GPU an event belongs to: by handle, else by UUID (a MIG handle's events).
func (c *Collector) gpuOf(d nvml.Device) *gpuState {
	for _, g := range c.gpus {
		g.xmu.Lock()
		same := g.dev != nil && g.dev == d
		g.xmu.Unlock()
		if same {
			return g
		}
	}
	if d == nil {
		return nil
	}
	if parent, ret := d.GetDeviceHandleFromMigDeviceHandle(); ret == nvml.SUCCESS {
		d = parent
	}
	uuid, ret := d.GetUUID()
	if ret != nvml.SUCCESS {
		return nil
	}
	for _, g := range c.gpus {
		g.xmu.Lock()
		same := g.id.UUID == uuid
		g.xmu.Unlock()
		if same {
			return g
		}
	}
	return nil
}
