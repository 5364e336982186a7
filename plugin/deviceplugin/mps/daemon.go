// Package mps runs NVIDIA's MPS control daemon for a pool whose device plugin shares GPUs with
// MPS (devicePlugin.sharing.mps), as k8s-device-plugin v0.17.4's mps-control-daemon does: the
// GPUs in EXCLUSIVE_PROCESS compute mode, `nvidia-cuda-mps-control -d` with its pipe and log
// directories under the MPS root, each client's default active thread percentage (100/replicas)
// and pinned device memory limit (memory/replicas), NVIDIA's .started marker. Beyond NVIDIA's,
// it records its verdict in the root (config.MPSStatus), which the node agent's check reads to
// open the device plugin's gate, and it restarts the control daemon when it stops answering
// instead of leaving the node's clients without one until the pod is restarted.
package mps

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpupolicy/gpupolicy/plugin/agent/hostfs"
	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/deviceplugin/devices"
)

// Options configure a Daemon. Zero values take the defaults.
type Options struct {
	Lib    nvml.Interface
	Config config.DevicePlugin
	// Root is where the host's MPS root (config.MPSHostRoot) is mounted: config.MPSContainerRoot.
	Root string
	// ShmDir is the daemon's /dev/shm, the host's <root>/shm: it must be a tmpfs, shared with
	// every client (the device plugin mounts the same directory there).
	ShmDir string
	// ControlBinary is NVIDIA's control program (config.MPSControlBinary, looked up in PATH).
	ControlBinary string
	HostRoot      string
	// Interval is how often the control daemon is asked whether it still answers.
	Interval time.Duration
	Logger   *slog.Logger
	Now      func() time.Time
}

// Daemon keeps one MPS control daemon running for the config's resource.
type Daemon struct {
	opts     Options
	log      *slog.Logger
	resource string
	replicas int

	mu      sync.Mutex
	status  config.MPSStatus
	judged  bool // a verdict has been recorded (readiness)
	running bool // the control daemon was started and answered
	checked time.Time
	tail    *tailer
}

// New checks that cfg shares GPUs with MPS and returns its daemon; nothing runs yet.
func New(opts Options) (*Daemon, error) {
	if err := config.ValidateDevicePlugin(opts.Config); err != nil {
		return nil, fmt.Errorf("device plugin config: %w", err)
	}
	strategy, replicas := opts.Config.Sharing.Strategy()
	if strategy != config.SharingMPS {
		return nil, fmt.Errorf("device plugin config: pool %q does not share GPUs with MPS (sharing.mps is not set): the MPS control daemon runs only for pools with devicePlugin.sharing.mps; re-render", opts.Config.Pool)
	}
	if opts.Root == "" {
		opts.Root = config.MPSContainerRoot
	}
	if opts.ShmDir == "" {
		opts.ShmDir = "/dev/shm"
	}
	if opts.ControlBinary == "" {
		opts.ControlBinary = config.MPSControlBinary
	}
	if opts.HostRoot == "" {
		opts.HostRoot = "/"
	}
	if opts.Interval <= 0 {
		opts.Interval = 10 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Daemon{opts: opts, log: opts.Logger.With("resource", opts.Config.ResourceName), resource: opts.Config.ResourceName, replicas: replicas}, nil
}

// Run keeps the control daemon running until ctx ends, then quits it, puts the GPUs back in
// DEFAULT compute mode and records that it stopped. A node that cannot run it (reasons in
// its record) is re-judged every interval; Run returns an error only when it cannot record.
func (d *Daemon) Run(ctx context.Context) error {
	t := time.NewTicker(d.opts.Interval)
	defer t.Stop()
	for {
		if err := d.reconcile(); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return d.stop()
		case <-t.C:
		}
	}
}

// Ready reports whether the daemon has judged the node (readiness), with its verdict.
func (d *Daemon) Ready() (bool, config.MPSStatus) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.judged, d.status
}

// Alive reports whether the loop has checked within three intervals (liveness).
func (d *Daemon) Alive() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return !d.judged || d.opts.Now().Sub(d.checked) < 3*d.opts.Interval
}

// reconcile checks the running control daemon, or starts it, and records the verdict.
func (d *Daemon) reconcile() error {
	d.mu.Lock()
	running := d.running
	d.mu.Unlock()
	if running {
		if d.ctl().Answers() {
			d.mu.Lock()
			st := d.status
			d.mu.Unlock()
			return d.record(st, true)
		}
		d.log.Error("the MPS control daemon stopped answering; starting it again")
	}
	st, err := d.start()
	if err != nil {
		d.log.Error("cannot run the MPS control daemon", "error", err)
		d.mu.Lock()
		started := d.running
		d.mu.Unlock()
		if started {
			// Started without its limits: quit it, so no client runs unbounded; the next
			// interval starts over.
			if _, qerr := d.control("quit"); qerr != nil {
				d.log.Error("cannot quit the MPS control daemon", "error", qerr)
			}
		}
		st = d.base()
		st.Reason = err.Error()
	}
	return d.record(st, err == nil)
}

func (d *Daemon) base() config.MPSStatus {
	return config.MPSStatus{Pool: d.opts.Config.Pool, Resource: d.resource, Replicas: d.replicas}
}

// start judges the node and starts the control daemon with NVIDIA's limits.
func (d *Daemon) start() (config.MPSStatus, error) {
	st := d.base()
	gpus, skipped, err := devices.Enumerate(d.opts.Lib, d.opts.HostRoot)
	if err != nil {
		return st, err
	}
	if len(skipped) > 0 {
		return st, fmt.Errorf("MPS needs every GPU of the node: %w", errors.Join(skipped...))
	}
	if len(gpus) == 0 {
		return st, errors.New("NVML finds no GPU on this node")
	}
	for _, g := range gpus {
		if g.MIGEnabled {
			return st, fmt.Errorf("GPU %d (%s) is in MIG mode: MPS does not share MIG devices (k8s-device-plugin refuses it too); disable MIG on it (nvidia-smi -i %d -mig 0) or move the node to a pool without sharing.mps", g.Index, g.UUID, g.Index)
		}
	}
	if err := IsTmpfs(d.opts.ShmDir, config.MPSShmDir(config.MPSHostRoot)); err != nil {
		return st, err
	}
	bin, err := exec.LookPath(d.opts.ControlBinary)
	if err != nil {
		return st, fmt.Errorf("NVIDIA's %s is not in the container (%v): the nvidia runtime injects it from the driver (compute capability); check the driver installs it and the pod runs with the GPU runtime class", d.opts.ControlBinary, err)
	}
	limits := map[string]string{}
	for _, g := range gpus {
		if ret := g.Handle.SetComputeMode(nvml.COMPUTEMODE_EXCLUSIVE_PROCESS); ret != nvml.SUCCESS {
			return st, fmt.Errorf("GPU %d (%s): set compute mode EXCLUSIVE_PROCESS: %s", g.Index, g.UUID, nvml.ErrorString(ret))
		}
		mem, ret := g.Handle.GetMemoryInfo()
		if ret == nvml.SUCCESS && mem.Total > 0 {
			// NVIDIA's perDevicePinnedDeviceMemoryLimits: the GPU's memory split evenly.
			limits[strconv.Itoa(g.Index)] = fmt.Sprintf("%vM", mem.Total/uint64(d.replicas)/1024/1024)
		}
		st.GPUs = append(st.GPUs, g.UUID)
	}
	ctl := d.ctl()
	ctl.Binary = bin
	if ctl.Answers() {
		// A control daemon already serves the pipe: one that outlived its pod, or, during a
		// hand-over from the GPU Operator, the operator's (same root, same paths). A second
		// would be refused ("already running"); take this one and give it this pool's limits.
		d.log.Info("a control daemon already answers on the pipe: using it", "pipe", ctl.PipeDir)
	} else if err := ctl.Start(); err != nil {
		return st, err
	}
	logDir := ctl.LogDir
	d.mu.Lock()
	d.running = true
	if d.tail == nil {
		d.tail = startTailer(d.log, logDir+"/control.log")
	}
	d.mu.Unlock()
	for _, index := range slices.Sorted(maps.Keys(limits)) {
		if _, err := d.control(fmt.Sprintf("set_default_device_pinned_mem_limit %s %s", index, limits[index])); err != nil {
			return st, fmt.Errorf("set the pinned memory limit of GPU %s: %w", index, err)
		}
	}
	st.ActiveThreadPercentage = 100 / d.replicas
	if _, err := d.control(fmt.Sprintf("set_default_active_thread_percentage %d", st.ActiveThreadPercentage)); err != nil {
		return st, fmt.Errorf("set the active thread percentage: %w", err)
	}
	st.PinnedMemoryLimits = limits
	if err := os.WriteFile(config.MPSStartedFile(d.opts.Root, d.resource), nil, 0o644); err != nil {
		return st, err
	}
	st.Ready = true
	d.log.Info("MPS control daemon started", "gpus", len(st.GPUs), "replicas", d.replicas,
		"activeThreadPercentage", st.ActiveThreadPercentage, "pinnedMemoryLimits", limits)
	return st, nil
}

// stop quits the control daemon and leaves the GPUs and the root as NVIDIA's Stop does.
func (d *Daemon) stop() error {
	d.mu.Lock()
	running, tail := d.running, d.tail
	d.running, d.tail = false, nil
	d.mu.Unlock()
	var errs []error
	if running {
		if _, err := d.control("quit"); err != nil {
			errs = append(errs, fmt.Errorf("quit the MPS control daemon: %w", err))
		}
	}
	tail.stop()
	if gpus, _, err := devices.Enumerate(d.opts.Lib, d.opts.HostRoot); err == nil {
		for _, g := range gpus {
			if ret := g.Handle.SetComputeMode(nvml.COMPUTEMODE_DEFAULT); ret != nvml.SUCCESS {
				errs = append(errs, fmt.Errorf("GPU %d: set compute mode DEFAULT: %s", g.Index, nvml.ErrorString(ret)))
			}
		}
	}
	if err := os.Remove(config.MPSStartedFile(d.opts.Root, d.resource)); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	if err := os.RemoveAll(config.MPSLogDir(d.opts.Root, d.resource)); err != nil {
		errs = append(errs, err)
	}
	st := d.base()
	st.Reason = "the MPS control daemon was stopped (its pod ended)"
	if err := d.record(st, false); err != nil {
		errs = append(errs, err)
	}
	d.log.Info("MPS control daemon stopped")
	return errors.Join(errs...)
}

// record writes the verdict into the root, atomically, so the agent never reads half a file.
func (d *Daemon) record(st config.MPSStatus, running bool) error {
	d.mu.Lock()
	same := d.judged && d.status.Ready == st.Ready && d.status.Reason == st.Reason
	d.running = running
	d.checked = d.opts.Now()
	d.mu.Unlock()
	if same {
		return nil
	}
	st.Time = d.opts.Now().UTC()
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	file := config.MPSStatusFile(d.opts.Root)
	if _, err := (hostfs.Writer{}).WriteFile("", file, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("record the MPS status in %s: %w (mount the host's %s at %s read-write)", file, err, config.MPSHostRoot, d.opts.Root)
	}
	d.mu.Lock()
	d.status, d.judged = st, true
	d.mu.Unlock()
	return nil
}

func (d *Daemon) pipeDir() string { return config.MPSPipeDir(d.opts.Root, d.resource) }

func (d *Daemon) ctl() Control {
	return Control{Binary: d.opts.ControlBinary, PipeDir: d.pipeDir(), LogDir: config.MPSLogDir(d.opts.Root, d.resource)}
}

// control sends one command to the control daemon.
func (d *Daemon) control(command string) (string, error) { return d.ctl().Send(command) }
