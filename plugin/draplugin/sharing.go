package draplugin

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/deviceplugin/mps"
	"github.com/gpupolicy/gpupolicy/plugin/draplugin/configapi"
)

// Where a claim's MPS control daemon lives and what its containers see, NVIDIA's DRA driver's
// layout: <root>/<id>/{pipe,shm,log}, the pipe directory at /tmp/nvidia-mps in the container.
const (
	mpsClientPipeDir  = "/tmp/nvidia-mps"
	annotationSharing = "gpupolicy.dev/sharing"
)

// sharingRecord is what a prepared claim changed on its GPUs, kept in an annotation of its CDI
// spec so that unprepare, after a restart too, puts it back.
type sharingRecord struct {
	// TimeSlice are the GPUs whose time-slice the claim set (reset to Default on unprepare).
	TimeSlice []string    `json:"timeSlice,omitempty"`
	MPS       []mpsRecord `json:"mps,omitempty"`
}

// mpsRecord is one MPS control daemon of a claim: its id (<claim uid>-<hash of its devices>,
// NVIDIA's), the devices it serves and the GPUs it put in EXCLUSIVE_PROCESS mode.
type mpsRecord struct {
	ID      string   `json:"id"`
	Devices []string `json:"devices"`
	GPUs    []string `json:"gpus"`
	// The defaults the daemon was given, to start it again after the plugin's restart.
	ActiveThreadPercentage *int              `json:"activeThreadPercentage,omitempty"`
	PinnedMemoryLimits     map[string]string `json:"pinnedMemoryLimits,omitempty"`
}

// configFor is one allocated device with the opaque config that applies to it.
type configFor struct {
	dev      Device
	request  string
	cfg      configapi.Config
	index    int // of the config in the claim's allocation (-1: the default)
	explicit bool
}

// deviceConfigs decodes the claim's opaque configs of this driver and picks for each device
// the last one naming its request (or naming none): the class's come first in the allocation,
// so a claim's own config wins over its class's, as in NVIDIA's driver. A config this driver
// cannot read, or one of the wrong kind for its device, refuses the claim.
func deviceConfigs(c *resourceapi.ResourceClaim, devs []Device, results []resourceapi.DeviceRequestAllocationResult) ([]configFor, error) {
	type decoded struct {
		requests []string
		cfg      configapi.Config
	}
	var configs []decoded
	all := slices.Clone(c.Status.Allocation.Devices.Config)
	// Class configs before claim configs, each in their own order.
	slices.SortStableFunc(all, func(a, b resourceapi.DeviceAllocationConfiguration) int {
		return cmp.Compare(sourceRank(a.Source), sourceRank(b.Source))
	})
	for i, ac := range all {
		o := ac.Opaque
		if o == nil || o.Driver != config.DRADriverName {
			continue
		}
		cfg, err := configapi.Decode(o.Parameters.Raw)
		if err != nil {
			return nil, fmt.Errorf("opaque config %d of driver %s (from the %s): %w", i, o.Driver, sourceName(ac.Source), err)
		}
		configs = append(configs, decoded{requests: ac.Requests, cfg: cfg})
	}
	out := make([]configFor, len(devs))
	for i, dev := range devs {
		r := results[i].Request
		out[i] = configFor{dev: dev, request: r, index: -1}
		for j := len(configs) - 1; j >= 0; j-- {
			if len(configs[j].requests) == 0 || slices.Contains(configs[j].requests, r) || slices.Contains(configs[j].requests, parentRequest(r)) {
				out[i].cfg, out[i].index, out[i].explicit = configs[j].cfg, j, true
				break
			}
		}
		_, gpuCfg := out[i].cfg.(*configapi.GpuConfig)
		_, migCfg := out[i].cfg.(*configapi.MigDeviceConfig)
		switch {
		case !out[i].explicit && dev.Parent == "":
			out[i].cfg = configapi.DefaultGpuConfig()
		case !out[i].explicit:
			out[i].cfg = configapi.DefaultMigDeviceConfig()
		case migCfg && dev.Parent == "":
			return nil, fmt.Errorf("request %s: a %s cannot configure %s, a whole GPU: use a %s", r, configapi.MigDeviceConfigKind, dev.Name, configapi.GpuConfigKind)
		case gpuCfg && dev.Parent != "":
			return nil, fmt.Errorf("request %s: a %s cannot configure %s, a MIG device: use a %s", r, configapi.GpuConfigKind, dev.Name, configapi.MigDeviceConfigKind)
		}
	}
	return out, nil
}

func sourceRank(s resourceapi.AllocationConfigSource) int {
	if s == resourceapi.AllocationConfigSourceClass {
		return 0
	}
	return 1
}

func sourceName(s resourceapi.AllocationConfigSource) string {
	if s == resourceapi.AllocationConfigSourceClass {
		return "DeviceClass"
	}
	return "claim"
}

// parentRequest is "gpu" of a subrequest result "gpu/small" (a config may name either).
func parentRequest(r string) string {
	p, _, _ := strings.Cut(r, "/")
	return p
}

// applySharing carries out the claim's explicit sharing configs: time-slicing sets each GPU's
// time-slice (compute mode DEFAULT, nvidia-smi compute-policy --set-timeslice, as NVIDIA's
// driver does), MPS starts one control daemon per config for its devices with the config's
// limits. It returns what it changed and the CDI edits of each device; on error it has undone
// what it did. A device without an explicit config is left as it is.
func (d *Driver) applySharing(claim string, cfgs []configFor) (sharingRecord, map[string]cdispec.ContainerEdits, error) {
	var rec sharingRecord
	edits := map[string]cdispec.ContainerEdits{}
	groups := map[int][]configFor{}
	var order []int
	for _, cf := range cfgs {
		if !cf.explicit {
			continue
		}
		if _, seen := groups[cf.index]; !seen {
			order = append(order, cf.index)
		}
		groups[cf.index] = append(groups[cf.index], cf)
	}
	for _, idx := range order {
		g := groups[idx]
		var mpsConfig *configapi.MpsConfig
		switch c := g[0].cfg.(type) {
		case *configapi.GpuConfig:
			if c.Sharing.Strategy == configapi.TimeSlicingStrategy {
				for _, cf := range g {
					if err := d.setTimeSlice(cf.dev.UUID, c.Sharing.TimeSlicingConfig.Interval.Int()); err != nil {
						d.releaseSharing(rec)
						return sharingRecord{}, nil, err
					}
					rec.TimeSlice = append(rec.TimeSlice, cf.dev.UUID)
				}
				continue
			}
			mpsConfig = c.Sharing.MpsConfig
		case *configapi.MigDeviceConfig:
			if c.Sharing.Strategy != configapi.MpsStrategy {
				continue // time-slicing of MIG devices has no setting (NVIDIA's driver sets none)
			}
			mpsConfig = c.Sharing.MpsConfig
		}
		m, e, err := d.startMPS(claim, g, mpsConfig)
		if err != nil {
			d.releaseSharing(rec)
			return sharingRecord{}, nil, err
		}
		rec.MPS = append(rec.MPS, m)
		for _, cf := range g {
			edits[cf.dev.Name] = e
		}
	}
	return rec, edits, nil
}

// setTimeSlice puts a GPU in DEFAULT compute mode and sets its time-slice (0 to 3).
func (d *Driver) setTimeSlice(uuid string, interval int) error {
	if err := d.setComputeMode(uuid, nvml.COMPUTEMODE_DEFAULT); err != nil {
		return err
	}
	cmd := exec.Command(d.opts.NvidiaSMI, "compute-policy", "-i", uuid, "--set-timeslice="+strconv.Itoa(interval))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("set the time-slice of GPU %s: %s: %w: %s", uuid, strings.Join(cmd.Args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (d *Driver) setComputeMode(uuid string, mode nvml.ComputeMode) error {
	dev, ret := d.opts.Lib.DeviceGetHandleByUUID(uuid)
	if ret == nvml.SUCCESS {
		ret = dev.SetComputeMode(mode)
	}
	if ret != nvml.SUCCESS {
		return fmt.Errorf("GPU %s: set compute mode %d: %s", uuid, mode, nvml.ErrorString(ret))
	}
	return nil
}

// mpsID is NVIDIA's id of a claim's control daemon: the claim UID and a hash of its devices.
func mpsID(claim string, uuids []string) string {
	h := sha256.Sum256([]byte(strings.Join(uuids, ",")))
	return claim + "-" + hex.EncodeToString(h[:])[:5]
}

func (d *Driver) mpsControl(id, visible string) mps.Control {
	root := filepath.Join(d.opts.MPSDir, "dra") // a claim's daemon is a resource of its own there
	return mps.Control{Binary: d.opts.MPSControlBinary, PipeDir: config.MPSPipeDir(root, id), LogDir: config.MPSLogDir(root, id), VisibleDevices: visible}
}

// startMPS starts (or finds running) the control daemon of one config's devices, with the
// config's defaults, and returns the CDI edits its clients get: NVIDIA's, the pipe directory at
// /tmp/nvidia-mps and the daemon's shared memory at /dev/shm.
func (d *Driver) startMPS(claim string, g []configFor, c *configapi.MpsConfig) (mpsRecord, cdispec.ContainerEdits, error) {
	var uuids, gpus []string
	for _, cf := range g {
		uuids = append(uuids, cf.dev.UUID)
		gpu := cmp.Or(cf.dev.Parent, cf.dev.UUID)
		if !slices.Contains(gpus, gpu) {
			gpus = append(gpus, gpu)
		}
	}
	rec := mpsRecord{ID: mpsID(claim, uuids), Devices: uuids, GPUs: gpus, ActiveThreadPercentage: c.DefaultActiveThreadPercentage}
	limits, err := c.PinnedMemoryLimits(uuids)
	if err != nil { // the config's own mistake, known only with the claim's devices
		return rec, cdispec.ContainerEdits{}, &refusal{reason: ReasonInvalidDeviceConfig, err: fmt.Errorf("request %s: %w", g[0].request, err)}
	}
	rec.PinnedMemoryLimits = limits
	ctl := d.mpsControl(rec.ID, strings.Join(uuids, ","))
	shm := filepath.Join(filepath.Dir(ctl.PipeDir), "shm")
	hostRoot := filepath.Join(d.opts.MPSHostRoot, "dra", rec.ID)
	if err := os.MkdirAll(shm, 0o755); err != nil {
		return rec, cdispec.ContainerEdits{}, err
	}
	fail := func(err error) (mpsRecord, cdispec.ContainerEdits, error) {
		d.stopMPS(rec)
		return rec, cdispec.ContainerEdits{}, fmt.Errorf("MPS control daemon for %s: %w", strings.Join(uuids, ","), err)
	}
	if err := mps.IsTmpfs(shm, filepath.Join(hostRoot, "shm")); err != nil {
		return fail(err)
	}
	if _, err := exec.LookPath(d.opts.MPSControlBinary); err != nil {
		return fail(fmt.Errorf("NVIDIA's %s is not in the DRA plugin's container (%v): the nvidia runtime injects it from the driver (capability compute)", d.opts.MPSControlBinary, err))
	}
	if err := d.runMPS(rec); err != nil {
		return fail(err)
	}
	d.log.Info("MPS control daemon started for claim", "claim", claim, "id", rec.ID, "devices", uuids,
		"activeThreadPercentage", c.DefaultActiveThreadPercentage, "pinnedMemoryLimits", limits)
	opts := []string{"rw", "nosuid", "nodev", "bind"}
	return rec, cdispec.ContainerEdits{
		Env: []string{"CUDA_MPS_PIPE_DIRECTORY=" + mpsClientPipeDir},
		Mounts: []*cdispec.Mount{
			{ContainerPath: "/dev/shm", HostPath: filepath.Join(hostRoot, "shm"), Options: opts},
			{ContainerPath: mpsClientPipeDir, HostPath: filepath.Join(hostRoot, "pipe"), Options: opts},
		},
	}, nil
}

// runMPS puts the record's GPUs in EXCLUSIVE_PROCESS mode and starts its control daemon, unless
// it answers already, with the record's defaults.
func (d *Driver) runMPS(rec mpsRecord) error {
	ctl := d.mpsControl(rec.ID, strings.Join(rec.Devices, ","))
	for _, gpu := range rec.GPUs {
		if err := d.setComputeMode(gpu, nvml.COMPUTEMODE_EXCLUSIVE_PROCESS); err != nil {
			return err
		}
	}
	if !ctl.Answers() {
		if err := ctl.Start(); err != nil {
			return err
		}
	}
	if p := rec.ActiveThreadPercentage; p != nil {
		if _, err := ctl.Send(fmt.Sprintf("set_default_active_thread_percentage %d", *p)); err != nil {
			return err
		}
	}
	for _, u := range slices.Sorted(maps.Keys(rec.PinnedMemoryLimits)) {
		if _, err := ctl.Send(fmt.Sprintf("set_default_device_pinned_mem_limit %s %s", u, rec.PinnedMemoryLimits[u])); err != nil {
			return err
		}
	}
	return nil
}

// resumeSharing starts again the MPS control daemons of the claims prepared before a restart
// of the plugin (they ended with its container): their pods keep running and need them.
func (d *Driver) resumeSharing() {
	d.mu.Lock()
	uids := slices.Collect(maps.Keys(d.claims))
	d.mu.Unlock()
	for _, uid := range uids {
		rec, err := d.cdi.sharing(uid)
		if err != nil {
			d.log.Error("cannot read the claim's sharing", "uid", uid, "error", err)
			continue
		}
		for _, m := range rec.MPS {
			if err := d.runMPS(m); err != nil {
				d.log.Error("cannot start the claim's MPS control daemon again", "uid", uid, "id", m.ID, "error", err)
			}
		}
	}
}

// stopMPS quits a claim's control daemon, gives its GPUs back in DEFAULT compute mode and
// removes its directories.
func (d *Driver) stopMPS(m mpsRecord) error {
	var errs []error
	ctl := d.mpsControl(m.ID, "")
	if ctl.Answers() {
		if _, err := ctl.Send("quit"); err != nil {
			errs = append(errs, err)
		}
	}
	for _, gpu := range m.GPUs {
		if err := d.setComputeMode(gpu, nvml.COMPUTEMODE_DEFAULT); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(filepath.Dir(ctl.PipeDir)); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// releaseSharing undoes a claim's record: time-slices back to Default, daemons stopped.
func (d *Driver) releaseSharing(rec sharingRecord) error {
	var errs []error
	for _, u := range rec.TimeSlice {
		if err := d.setTimeSlice(u, configapi.DefaultTimeSlice.Int()); err != nil {
			errs = append(errs, err)
		}
	}
	for _, m := range rec.MPS {
		if err := d.stopMPS(m); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (r sharingRecord) empty() bool { return len(r.TimeSlice) == 0 && len(r.MPS) == 0 }

func (r sharingRecord) annotation() string {
	b, _ := json.Marshal(r)
	return string(b)
}

// Why a claim's device config keeps it from being prepared: the reason of the Event and of the
// devices' Ready condition in the claim's status.
const (
	ReasonInvalidDeviceConfig = "InvalidDeviceConfig" // the config cannot be read or applied to its devices
	ReasonSharingFailed       = "SharingFailed"       // the node could not apply it (nvidia-smi, the MPS daemon)
)

// refusal is a prepare error the claim's own config causes, with its reason.
type refusal struct {
	reason string
	err    error
}

func (r *refusal) Error() string { return r.err.Error() }
func (r *refusal) Unwrap() error { return r.err }

// refuse records why a claim cannot be prepared, on the claim, where `kubectl describe
// resourceclaim` shows it (the kubelet puts the same error in the pod's
// FailedPrepareDynamicResources event): an Event, and a Ready=False condition on each of its
// devices of this node in status.devices, the field the API gives drivers for their devices'
// state (the API server lets a driver write only its own entries, through RBAC on
// resourceclaims/driver). Best effort: failures are logged.
func (d *Driver) refuse(ctx context.Context, c *resourceapi.ResourceClaim, r *refusal) {
	if d.opts.KubeClient == nil {
		return
	}
	log := d.log.With("claim", c.Namespace+"/"+c.Name)
	now := metav1.Now()
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: c.Name + ".", Namespace: c.Namespace},
		InvolvedObject: corev1.ObjectReference{APIVersion: "resource.k8s.io/v1", Kind: "ResourceClaim", Namespace: c.Namespace, Name: c.Name, UID: c.UID},
		Reason:         r.reason, Message: r.Error(), Type: corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: "gpu-dra-plugin", Host: d.opts.NodeName},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	if _, err := d.opts.KubeClient.CoreV1().Events(c.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		log.Warn("cannot record the claim's event", "error", err)
	}
	// Read, set this driver's entries, write: the allocation and the other drivers' entries stay
	// as the API server has them (a conflict re-reads).
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := d.opts.KubeClient.ResourceV1().ResourceClaims(c.Namespace).Get(ctx, c.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur.UID != c.UID || cur.Status.Allocation == nil {
			return nil // another claim of that name now, or deallocated: nothing of ours to say
		}
		for _, res := range cur.Status.Allocation.Devices.Results {
			if res.Driver != config.DRADriverName || res.Pool != d.opts.NodeName {
				continue
			}
			setDeviceCondition(&cur.Status, res, metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse,
				Reason: r.reason, Message: r.Error(), LastTransitionTime: now, ObservedGeneration: cur.Generation})
		}
		_, err = d.opts.KubeClient.ResourceV1().ResourceClaims(c.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{FieldManager: config.DRADriverName})
		return err
	})
	if err != nil {
		log.Warn("cannot record the devices' condition in the claim's status", "error", err)
	}
}

// setDeviceCondition sets cond on the status entry of the allocated device res (added when
// missing), replacing a condition of its type.
func setDeviceCondition(st *resourceapi.ResourceClaimStatus, res resourceapi.DeviceRequestAllocationResult, cond metav1.Condition) {
	for i := range st.Devices {
		e := &st.Devices[i]
		if e.Driver == res.Driver && e.Pool == res.Pool && e.Device == res.Device && equalShareID(e.ShareID, res.ShareID) {
			meta.SetStatusCondition(&e.Conditions, cond)
			return
		}
	}
	e := resourceapi.AllocatedDeviceStatus{Driver: res.Driver, Pool: res.Pool, Device: res.Device, Conditions: []metav1.Condition{cond}}
	if res.ShareID != nil {
		id := string(*res.ShareID)
		e.ShareID = &id
	}
	st.Devices = append(st.Devices, e)
}

func equalShareID(a *string, b *types.UID) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == string(*b)
}
