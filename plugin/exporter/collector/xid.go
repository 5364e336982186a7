package collector

import (
	"context"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// waitTimeoutMs bounds one EventSet.Wait, so the watcher notices shutdown within that time.
const waitTimeoutMs = 500

// watchXIDs registers every GPU that supports it for XID critical-error events and records each
// XID until ctx ends. Without event support (older GPUs, some mocks) the exporter still runs;
// DCGM_FI_DEV_XID_ERRORS then stays 0.
func (c *Collector) watchXIDs(ctx context.Context) {
	set, ret := c.lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		c.errs.add("nvmlEventSetCreate", ret)
		c.log.Warn("XID events unavailable", "stage", "xid", "error", returnName(ret))
		return
	}
	defer set.Free()
	registered := 0
	for _, g := range c.gpus {
		g.xmu.Lock()
		dev := g.dev
		g.xmu.Unlock()
		if dev == nil {
			continue
		}
		types, ret := dev.GetSupportedEventTypes()
		if ret != nvml.SUCCESS || types&nvml.EventTypeXidCriticalError == 0 {
			continue
		}
		if ret := dev.RegisterEvents(nvml.EventTypeXidCriticalError, set); ret != nvml.SUCCESS {
			c.errs.add("nvmlDeviceRegisterEvents", ret)
			c.log.Warn("XID events not registered", "stage", "xid", "gpu", g.index, "error", returnName(ret))
			continue
		}
		registered++
	}
	c.log.Info("watching XID events", "stage", "xid", "gpus", registered)
	if registered == 0 {
		return
	}
	for ctx.Err() == nil {
		ev, ret := set.Wait(waitTimeoutMs)
		switch {
		case ret == nvml.SUCCESS:
			if ev.EventType&nvml.EventTypeXidCriticalError != 0 {
				c.recordXID(ev)
			}
		case ret == nvml.ERROR_TIMEOUT:
		default:
			c.errs.add("nvmlEventSetWait", ret)
			select { // a failing wait must not spin
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
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
	select {
	case c.kick <- struct{}{}:
	default:
	}
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
