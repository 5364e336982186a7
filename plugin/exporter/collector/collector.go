// Package collector reads GPU telemetry from NVML on an interval into an immutable Snapshot,
// so that a Prometheus scrape never waits on NVML (a slow or hung GPU delays the next snapshot,
// not the scrape). It also watches the NVML event set for XID errors and keeps reporting a GPU
// that fell off the bus, with up=0 and its last error, while the other GPUs report normally.
package collector

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/gpupolicy/gpupolicy/plugin/nodefacts"
)

// Config tunes a Collector.
type Config struct {
	Interval time.Duration // time between collections
	Hostname string        // label Hostname
	Logger   *slog.Logger
}

// Collector owns the NVML handles and publishes snapshots.
type Collector struct {
	lib    nvml.Interface
	cfg    Config
	log    *slog.Logger
	driver Driver
	gpus   []*gpuState
	errs   callErrors

	mu          sync.Mutex // serialises collections (per-GPU state, GPM buffer)
	gpmBuf      *nvml.GpmMetricsGetType
	collections uint64
	snap        atomic.Pointer[Snapshot]
	kick        chan struct{} // an XID arrived or a GPU was lost: publish it without waiting for the interval
	ready       chan struct{} // closed by Run once XIDs are registered and the first snapshot is taken
}

// gpuState is the collector's per-GPU memory between cycles.
type gpuState struct {
	index      int // NVML index, immutable (the XID watcher reads it without a lock)
	dev        nvml.Device
	id         Identity
	idComplete bool
	skip       uint64 // bit i: gpuReaders[i] answered "not supported"; skipped until re-probed
	lastErr    *LastError
	lost       bool // set by the current cycle

	gpmChecked, gpmSupported bool
	gpm                      *gpmSampler
	migs                     map[string]migStatic
	migGPM                   map[int]*gpmSampler
	migGPMDone               map[int]Values // GPU instances sampled in this cycle

	xmu     sync.Mutex // XID fields, written by the event watcher
	lastXID uint64
	xids    map[uint64]uint64
}

// reprobeEvery is how many cycles an unsupported query stays skipped; MIG mode or a driver
// update can make it answer again.
const reprobeEvery = 40

// New discovers the GPUs and reads the driver identity. It fails only when NVML cannot list
// devices at all; a GPU that is already lost is kept and reported with up=0.
func New(lib nvml.Interface, cfg Config) (*Collector, error) {
	if cfg.Interval <= 0 {
		return nil, fmt.Errorf("collector interval must be > 0, got %s", cfg.Interval)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	c := &Collector{lib: lib, cfg: cfg, log: cfg.Logger, gpmBuf: &nvml.GpmMetricsGetType{}, kick: make(chan struct{}, 1),
		ready: make(chan struct{})}
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("nvmlDeviceGetCount: %s", returnName(ret))
	}
	c.driver = c.readDriver()
	for i := range n {
		g := &gpuState{index: i, id: Identity{Index: i}, migs: map[string]migStatic{}, migGPM: map[int]*gpmSampler{}, xids: map[uint64]uint64{}}
		dev, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			c.fail(g, "nvmlDeviceGetHandleByIndex", ret)
		} else {
			g.dev = dev
			c.readIdentity(g)
		}
		c.gpus = append(c.gpus, g)
	}
	return c, nil
}

func (c *Collector) readDriver() Driver {
	d, failed := nodefacts.ReadDriver(c.lib)
	for _, f := range failed {
		c.errs.add(f.Call, f.Ret)
	}
	return d
}

// readIdentity fills the labels of g; it is retried each cycle until complete. A field an
// earlier read got keeps its value when the retry's call fails.
func (c *Collector) readIdentity(g *gpuState) {
	id, failed := nodefacts.ReadIdentity(g.dev, g.index)
	for _, f := range failed {
		c.ok(g, f.Call, f.Ret)
	}
	old := g.id
	id.UUID, id.PCIBusID, id.Device, id.Model = cmp.Or(id.UUID, old.UUID), cmp.Or(id.PCIBusID, old.PCIBusID), cmp.Or(id.Device, old.Device), cmp.Or(id.Model, old.Model)
	g.idComplete = len(failed) == 0
	g.xmu.Lock() // the XID watcher reads the identity
	g.id = id
	g.xmu.Unlock()
}

// ok reports whether ret is SUCCESS; otherwise it records the error (NOT_SUPPORTED is not an
// error) and marks the GPU lost when the error says so.
func (c *Collector) ok(g *gpuState, call string, ret nvml.Return) bool {
	if ret == nvml.SUCCESS {
		return true
	}
	if !unsupported(ret) {
		c.fail(g, call, ret)
	}
	return false
}

func (c *Collector) fail(g *gpuState, call string, ret nvml.Return) {
	c.errs.add(call, ret)
	g.lastErr = &LastError{Call: call, Error: returnName(ret), Time: time.Now()}
	if gpuGone(ret) {
		g.lost = true
	}
}

// Snapshot returns the latest snapshot, or nil before the first collection finished.
func (c *Collector) Snapshot() *Snapshot { return c.snap.Load() }

// Collect reads every GPU once and publishes the result. Run calls it on the interval; tests
// and benchmarks call it directly.
func (c *Collector) Collect() *Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	start := time.Now()
	c.collections++
	reprobe := c.collections%reprobeEvery == 0
	gpus := make([]GPU, len(c.gpus))
	for i, g := range c.gpus {
		if reprobe {
			g.skip = 0
		}
		gpus[i] = c.collectGPU(g)
	}
	prev := c.snap.Load()
	s := &Snapshot{Seq: 1, Time: start, Duration: time.Since(start), Collections: c.collections,
		Hostname: c.cfg.Hostname, Driver: c.driver, GPUs: gpus, CallErrors: c.errs.list()}
	if prev != nil {
		s.Seq = prev.Seq + 1
	}
	c.snap.Store(s)
	return s
}

func (c *Collector) collectGPU(g *gpuState) GPU {
	g.lost = false
	out := GPU{Values: emptyValues()}
	if g.dev == nil {
		if dev, ret := c.lib.DeviceGetHandleByIndex(g.id.Index); c.ok(g, "nvmlDeviceGetHandleByIndex", ret) {
			g.xmu.Lock()
			g.dev = dev
			g.xmu.Unlock()
		}
	}
	if g.dev != nil && !g.idComplete {
		c.readIdentity(g)
	}
	if g.dev != nil && !g.lost {
		c.readGPU(g, &out)
	}
	if g.dev == nil {
		g.lost = true
	}
	out.Identity, out.Up, out.LastError = g.id, !g.lost, g.lastErr
	g.xmu.Lock()
	out.LastXID = g.lastXID
	for x, n := range g.xids {
		out.XIDs = append(out.XIDs, XIDCount{XID: x, Count: n})
	}
	g.xmu.Unlock()
	slices.SortFunc(out.XIDs, func(a, b XIDCount) int { return cmp.Compare(a.XID, b.XID) })
	return out
}

// readGPU runs every reader, then GPM and MIG, stopping at the first sign the GPU is gone.
func (c *Collector) readGPU(g *gpuState, out *GPU) {
	for i, r := range gpuReaders {
		if g.skip&(1<<i) != 0 {
			continue
		}
		tmp := out.Values
		ret := r.read(g.dev, &tmp)
		switch {
		case ret == nvml.SUCCESS:
			out.Values = tmp
		case unsupported(ret):
			g.skip |= 1 << i
		default:
			c.fail(g, r.call, ret)
			if g.lost {
				out.Values = emptyValues() // a lost GPU reports nothing but up=0
				return
			}
		}
	}
	c.sampleGPM(g, &out.Values)
	clear(g.migGPMDone)
	if g.migGPMDone == nil {
		g.migGPMDone = map[int]Values{}
	}
	out.MIG = c.readMIGs(g)
	if g.lost {
		out.Values, out.MIG = emptyValues(), nil
	}
}

func (c *Collector) sampleGPM(g *gpuState, v *Values) {
	if !g.gpmChecked {
		sup, ret := g.dev.GpmQueryDeviceSupport()
		if ret != nvml.SUCCESS && !unsupported(ret) {
			c.fail(g, "nvmlGpmQueryDeviceSupport", ret)
			return // ask again next cycle
		}
		g.gpmChecked, g.gpmSupported = true, ret == nvml.SUCCESS && sup.IsSupportedDevice != 0
	}
	if !g.gpmSupported {
		return
	}
	if g.gpm == nil {
		s, ret := newGPMSampler(c.lib)
		if !c.ok(g, "nvmlGpmSampleAlloc", ret) {
			return
		}
		g.gpm = s
	}
	tmp := *v
	call, ret := g.gpm.sample(c.lib, c.gpmBuf, g.dev.GpmSampleGet, &tmp)
	if ret == nvml.SUCCESS {
		*v = tmp
	} else {
		c.ok(g, call, ret)
	}
}

// Run collects immediately, then every interval (and right after an XID event or a lost GPU)
// until ctx ends. XID events are registered before the first collection, so once Ready is
// closed (the exporter's /readyz) no XID goes uncounted.
func (c *Collector) Run(ctx context.Context) {
	var wg sync.WaitGroup
	if w := c.registerXIDs(); w != nil {
		wg.Go(func() { w.Run(ctx, c.handleEvent) })
	}
	defer wg.Wait()
	c.logCollect(c.Collect())
	close(c.ready)
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-c.kick:
		}
		c.logCollect(c.Collect())
	}
}

// Ready is closed once Run has registered the XID events and taken its first snapshot: from
// then on /metrics has every GPU and no XID goes uncounted (the exporter's /readyz).
func (c *Collector) Ready() <-chan struct{} { return c.ready }

func (c *Collector) logCollect(s *Snapshot) {
	for _, g := range s.GPUs {
		if !g.Up {
			c.log.Warn("GPU not answering", "stage", "collect", "gpu", g.Index, "uuid", g.UUID, "lastError", g.LastError)
		}
	}
	c.log.Debug("collected", "stage", "collect", "gpus", len(s.GPUs), "duration", s.Duration)
}
