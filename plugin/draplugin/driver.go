package draplugin

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/deviceplugin/devices"
	"github.com/gpupolicy/gpupolicy/plugin/deviceplugin/health"
)

// Options configure the driver.
type Options struct {
	Lib        nvml.Interface
	Config     config.DevicePlugin // healthChecks apply; the device plugin's other fields do not
	KubeClient kubernetes.Interface
	NodeName   string
	// PluginsDir is the kubelet's plugins directory (<dir>/gpu.nvidia.com/dra.sock is served);
	// RegistryDir its plugins_registry (gpu.nvidia.com-reg.sock); CDIDir the host's CDI specs.
	PluginsDir, RegistryDir, CDIDir string
	HostRoot                        string
	ProbeInterval                   time.Duration
	WaitTimeout                     time.Duration // of one NVML event wait (tests shorten it)
	Logger                          *slog.Logger
	// Sharing per claim (GpuConfig): MPSDir is where the host's MPS root (MPSHostRoot) is
	// mounted, read-write; MPSControlBinary and NvidiaSMI are NVIDIA's programs, injected by
	// the nvidia runtime (defaults: /mps, /run/nvidia/mps, nvidia-cuda-mps-control, nvidia-smi).
	MPSDir, MPSHostRoot, MPSControlBinary, NvidiaSMI string
}

// Driver is the gpu.nvidia.com DRA driver of one node.
type Driver struct {
	opts    Options
	log     *slog.Logger
	cdi     cdiSpecs
	devices []Device
	byName  map[string]*Device
	monitor *health.Monitor

	mu        sync.Mutex
	unhealthy map[string]string      // device UUID -> reason, withdrawn from the slice
	claims    map[types.UID][]string // prepared claim -> its device names
	helper    *kubeletplugin.Helper
	published chan []string // device names of each publication, for tests (nil: none)
}

// New enumerates the node's devices; nothing is served until Run.
func New(opts Options) (*Driver, error) {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.NodeName == "" {
		return nil, errors.New("the node name is required (--node-name or $NODE_NAME): ResourceSlices are published for one node")
	}
	opts.MPSDir = cmp.Or(opts.MPSDir, config.MPSContainerRoot)
	opts.MPSHostRoot = cmp.Or(opts.MPSHostRoot, config.MPSHostRoot)
	opts.MPSControlBinary = cmp.Or(opts.MPSControlBinary, config.MPSControlBinary)
	opts.NvidiaSMI = cmp.Or(opts.NvidiaSMI, "nvidia-smi")
	gpus, skipped, err := devices.Enumerate(opts.Lib, opts.HostRoot)
	if err != nil {
		return nil, err
	}
	for _, problem := range skipped {
		opts.Logger.Error("GPU problem at start", "error", problem)
	}
	d := &Driver{opts: opts, log: opts.Logger, cdi: cdiSpecs{dir: opts.CDIDir, hostRoot: opts.HostRoot},
		devices: Inventory(opts.Lib, gpus, opts.HostRoot), byName: map[string]*Device{},
		unhealthy: map[string]string{}}
	for i := range d.devices {
		d.byName[d.devices[i].Name] = &d.devices[i]
	}
	// Claims prepared before a restart still hold their devices.
	if err := os.MkdirAll(opts.CDIDir, 0o755); err != nil {
		return nil, fmt.Errorf("--cdi-dir %s: %w", opts.CDIDir, err)
	}
	if d.claims, err = d.cdi.prepared(); err != nil {
		return nil, fmt.Errorf("read prepared claims from %s: %w", opts.CDIDir, err)
	}
	if opts.Config.HealthChecks.Enabled {
		recovery := config.DefaultRecoveryPeriod
		if r := opts.Config.HealthChecks.RecoveryPeriod; r != "" {
			if recovery, err = time.ParseDuration(r); err != nil {
				return nil, fmt.Errorf("healthChecks.recoveryPeriod %q: %w", r, err)
			}
		}
		d.monitor = health.New(opts.Lib, gpus, health.Options{IgnoredXIDs: opts.Config.HealthChecks.IgnoredXIDs,
			RecoveryPeriod: recovery, ProbeInterval: opts.ProbeInterval, WaitTimeout: opts.WaitTimeout, Logger: opts.Logger})
	}
	return d, nil
}

// Devices are the node's allocatable devices, healthy or not.
func (d *Driver) Devices() []Device { return d.devices }

// Run registers with the kubelet (the helper keeps the registration socket in place, and the
// kubelet's plugin watcher finds it again after a kubelet restart), publishes the node's
// ResourceSlice and republishes it on every health change, until ctx ends. The slices stay
// published when the plugin stops (a restart must not withdraw devices pods are using); the
// resourceslice controller reconciles them at the next start.
func (d *Driver) Run(ctx context.Context) error {
	dataDir := d.opts.PluginsDir + "/" + config.DRADriverName
	for _, dir := range []string{dataDir, d.opts.RegistryDir} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return fmt.Errorf("plugin directory %s: %w (mount the kubelet's plugins and plugins_registry directories)", dir, err)
		}
	}
	helper, err := kubeletplugin.Start(ctx, d,
		kubeletplugin.DriverName(config.DRADriverName),
		kubeletplugin.KubeClient(d.opts.KubeClient),
		kubeletplugin.NodeName(d.opts.NodeName),
		kubeletplugin.PluginDataDirectoryPath(dataDir),
		kubeletplugin.RegistrarDirectoryPath(d.opts.RegistryDir),
		kubeletplugin.CDIDirectory(d.opts.CDIDir),
		// The kubelet's health stream would need a report every 30 s; unhealthy devices leave
		// the slice instead, which also stops the scheduler from picking them.
		kubeletplugin.HealthService(false),
	)
	if err != nil {
		return fmt.Errorf("start the DRA kubelet plugin: %w", err)
	}
	d.mu.Lock()
	d.helper = helper
	d.mu.Unlock()
	defer helper.Stop()
	// The health watch is in place, and devices bad at start are left out, before the first
	// publication: nothing between start and publication goes unseen.
	if d.monitor != nil {
		d.monitor.Start(func(u health.Update) { d.recordHealth(u) })
	}
	d.resumeSharing()
	if err := d.publish(ctx); err != nil {
		return err
	}
	d.mu.Lock()
	prepared := len(d.claims)
	d.mu.Unlock()
	d.log.Info("DRA plugin started", "driver", config.DRADriverName, "devices", len(d.devices), "preparedClaims", prepared)
	if d.monitor != nil {
		d.monitor.Run(ctx, func(u health.Update) { d.applyHealth(ctx, u) })
	}
	<-ctx.Done()
	d.log.Info("DRA plugin stopped")
	return nil
}

// publish hands the helper the node's pool with every healthy device; the resourceslice
// controller creates, updates or deletes the slices to match.
func (d *Driver) publish(ctx context.Context) error {
	d.mu.Lock()
	var devs []resourceapi.Device
	var names []string
	for _, dev := range d.devices {
		if _, bad := d.unhealthy[dev.UUID]; bad {
			continue
		}
		if _, bad := d.unhealthy[dev.Parent]; dev.Parent != "" && bad {
			continue
		}
		devs = append(devs, dev.API)
		names = append(names, dev.Name)
	}
	helper, published := d.helper, d.published
	d.mu.Unlock()
	err := helper.PublishResources(ctx, resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		d.opts.NodeName: {Slices: []resourceslice.Slice{{Devices: devs}}},
	}})
	if err != nil {
		return fmt.Errorf("publish ResourceSlices: %w", err)
	}
	d.log.Info("ResourceSlice published", "devices", len(devs), "withdrawn", len(d.devices)-len(devs))
	if published != nil {
		published <- names
	}
	return nil
}

// recordHealth keeps u in the driver's view of unhealthy devices; it reports whether that
// changed what is published.
func (d *Driver) recordHealth(u health.Update) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, was := d.unhealthy[u.UUID]
	if u.Healthy {
		delete(d.unhealthy, u.UUID)
	} else {
		d.unhealthy[u.UUID] = u.Reason
	}
	return was == u.Healthy
}

func (d *Driver) applyHealth(ctx context.Context, u health.Update) {
	if !d.recordHealth(u) {
		return
	}
	if u.Healthy {
		d.log.Info("device healthy again: republished", "uuid", u.UUID)
	} else {
		d.log.Warn("device unhealthy: withdrawn from the ResourceSlice", "uuid", u.UUID, "reason", u.Reason)
	}
	if err := d.publish(ctx); err != nil && ctx.Err() == nil {
		d.log.Error("republish after a health change", "error", err)
	}
}

// PrepareResourceClaims writes each claim's CDI spec and returns its CDI device ids. A claim is
// refused (and retried by the kubelet) when a device is not this node's, is unhealthy, or is
// already prepared for another claim: the driver is the last line of defence against two
// workloads on one GPU.
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := map[types.UID]kubeletplugin.PrepareResult{}
	for _, c := range claims {
		out[c.UID] = d.prepare(c)
		var r *refusal
		if errors.As(out[c.UID].Err, &r) {
			d.refuse(ctx, c, r)
		}
	}
	return out, nil
}

func (d *Driver) prepare(c *resourceapi.ResourceClaim) kubeletplugin.PrepareResult {
	if c.Status.Allocation == nil {
		return kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s/%s is not allocated", c.Namespace, c.Name)}
	}
	var devs []Device
	var results []resourceapi.DeviceRequestAllocationResult
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver != config.DRADriverName {
			continue
		}
		if r.Pool != d.opts.NodeName {
			return kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s/%s: device %s is in pool %s, not this node's (%s)", c.Namespace, c.Name, r.Device, r.Pool, d.opts.NodeName)}
		}
		dev, ok := d.byName[r.Device]
		if !ok {
			return kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s/%s: device %s does not exist on node %s", c.Namespace, c.Name, r.Device, d.opts.NodeName)}
		}
		devs = append(devs, *dev)
		results = append(results, r)
	}
	names := make([]string, len(devs))
	for i, dev := range devs {
		names[i] = dev.Name
	}
	slices.Sort(names)
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, dev := range devs {
		if reason, bad := d.unhealthy[dev.UUID]; bad {
			return kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s/%s: device %s (%s) is unhealthy: %s", c.Namespace, c.Name, dev.Name, dev.UUID, reason)}
		}
		for uid, held := range d.claims {
			if uid != c.UID && d.overlaps(held, dev) {
				return kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s/%s: device %s is already prepared for claim %s", c.Namespace, c.Name, dev.Name, uid)}
			}
		}
	}
	if _, again := d.claims[c.UID]; again {
		// Prepared before (the kubelet retries, or restarts): its sharing is in place.
		if ids, err := d.cdi.ids(c.UID); err == nil {
			return d.prepared(c, names, results, ids)
		}
	}
	cfgs, err := deviceConfigs(c, devs, results)
	if err != nil {
		return kubeletplugin.PrepareResult{Err: &refusal{reason: ReasonInvalidDeviceConfig, err: fmt.Errorf("claim %s/%s: %w", c.Namespace, c.Name, err)}}
	}
	rec, edits, err := d.applySharing(string(c.UID), cfgs)
	if err != nil {
		r := &refusal{reason: ReasonSharingFailed, err: fmt.Errorf("claim %s/%s: %w", c.Namespace, c.Name, err)}
		var inner *refusal
		if errors.As(err, &inner) {
			r.reason = inner.reason
		}
		return kubeletplugin.PrepareResult{Err: r}
	}
	ids, err := d.cdi.write(c.UID, devs, edits, rec)
	if err != nil {
		if rerr := d.releaseSharing(rec); rerr != nil {
			d.log.Error("cannot undo the claim's sharing", "claim", c.Namespace+"/"+c.Name, "error", rerr)
		}
		return kubeletplugin.PrepareResult{Err: err}
	}
	return d.prepared(c, names, results, ids)
}

// prepared records the claim and its result.
func (d *Driver) prepared(c *resourceapi.ResourceClaim, names []string, results []resourceapi.DeviceRequestAllocationResult, ids map[string][]string) kubeletplugin.PrepareResult {
	d.claims[c.UID] = names
	res := kubeletplugin.PrepareResult{}
	for _, r := range results {
		res.Devices = append(res.Devices, kubeletplugin.Device{Requests: []string{r.Request}, PoolName: r.Pool, DeviceName: r.Device, CDIDeviceIDs: ids[r.Device]})
	}
	d.log.Info("claim prepared", "claim", c.Namespace+"/"+c.Name, "uid", c.UID, "devices", strings.Join(names, ","))
	return res
}

// overlaps reports whether a claim holding the devices held uses dev or the GPU it is part of
// (a whole GPU and one of its MIG devices cannot both be in use).
func (d *Driver) overlaps(held []string, dev Device) bool {
	for _, name := range held {
		h, ok := d.byName[name]
		if !ok {
			continue
		}
		if h.UUID == dev.UUID || (h.Parent != "" && h.Parent == dev.UUID) || (dev.Parent != "" && dev.Parent == h.UUID) {
			return true
		}
	}
	return false
}

// UnprepareResourceClaims undoes the claims' sharing (time-slices back to Default, MPS daemons
// stopped) and removes their CDI specs; an unknown claim is already done.
func (d *Driver) UnprepareResourceClaims(_ context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := map[types.UID]error{}
	for _, c := range claims {
		rec, err := d.cdi.sharing(c.UID)
		if err == nil && !rec.empty() {
			err = d.releaseSharing(rec)
		}
		if err == nil {
			err = d.cdi.remove(c.UID)
		}
		if err == nil {
			d.mu.Lock()
			delete(d.claims, c.UID)
			d.mu.Unlock()
			d.log.Info("claim unprepared", "claim", c.String(), "uid", c.UID)
		}
		out[c.UID] = err
	}
	return out, nil
}

// HandleError logs background errors (slice publication); they are all retried by the helper.
func (d *Driver) HandleError(_ context.Context, err error, msg string) {
	d.log.Error(msg, "error", err, "recoverable", errors.Is(err, kubeletplugin.ErrRecoverable))
}

// WatchHealthStatus is off (HealthService(false)): health shows as withdrawn devices.
func (d *Driver) WatchHealthStatus(context.Context, chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}
