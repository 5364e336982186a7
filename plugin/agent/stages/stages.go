// Package stages builds the node agent's production stage checks from its configuration:
// what "the driver stage is done" and "the toolkit stage is done" mean on a node, checked
// from host files only, so the gate itself stays unprivileged and needs no NVML.
package stages

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"time"

	"github.com/gpupolicy/gpupolicy/plugin/agent/driver"
	"github.com/gpupolicy/gpupolicy/plugin/agent/gate"
	"github.com/gpupolicy/gpupolicy/plugin/agent/wake"
	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/nodefacts/hostfacts"
)

// Stage names beyond config's: the entry stage and the stage that keeps disabled gates shut.
const (
	StageEntry    = "entry"
	StageDisabled = "disabled"
)

// Checks returns the stage list of `gpu-node-agent gate` for cfg: the entry, then one check
// per enabled check of the stage table (config.Gates), in its order, each opening the labels
// the table assigns to it, and last the disabled stages' labels kept shut. Every check is a
// function of the pass's facts (gate.Facts: the Node and hostfacts.Facts, read once by the
// reconciler). A new stage's check is one entry of checkFor.
func Checks(cfg *config.Agent) []gate.StageCheck {
	checkFor := map[string]gate.CheckFunc{
		config.StageDriver:           poolDriverCheck(cfg),
		config.StageToolkit:          ToolkitCheck(cfg),
		config.StageMIGManager:       MIGCheck(cfg),
		config.StageMPSControlDaemon: MPSCheck(cfg),
	}
	checks := []gate.StageCheck{{Stage: StageEntry, Opens: config.GateLabels("", cfg.Stages)}}
	for _, stage := range config.EnabledChecks(cfg.Stages) {
		check, ok := checkFor[stage]
		if !ok {
			panic("stages: no check for stage " + stage + " of config.Gates")
		}
		checks = append(checks, gate.StageCheck{Stage: stage, Opens: config.GateLabels(stage, cfg.Stages), Check: check})
	}
	if disabled := config.DisabledGateLabels(cfg.Stages); len(disabled) > 0 {
		// Last, so its permanent "not ready" closes nothing but its own labels.
		checks = append(checks, gate.StageCheck{Stage: StageDisabled, Opens: disabled, SkipCondition: true,
			Check: gate.Static(false, "stages disabled in the policy; their labels stay closed")})
	}
	return checks
}

// DriverCheck verifies the kernel module's version against driver.version/enforce.
func DriverCheck(cfg *config.Agent) gate.CheckFunc {
	return func(f *gate.Facts) gate.Result {
		if err := f.Host.KernelDriverErr; err != nil {
			res := gate.Result{Reason: err.Error(), ConditionReason: config.ReasonDriverNotReady}
			if errors.Is(err, hostfacts.ErrNoDriver) {
				res.Labels = map[string]string{config.LabelDriverVersion: "", config.LabelDriverDrift: "", config.LabelDriverKernelModules: ""}
				res.ConditionReason = config.ReasonDriverNotLoaded
			}
			return res
		}
		// Kernel module version only: NVML is not there before the toolkit stage.
		v := driver.Compare(cfg.Driver, cfg.CUDAVersion, f.Host.KernelDriver, nil)
		v.CheckModules(cfg.Driver, f.Host.KernelModules)
		labels, annotations := v.Labels()
		reason := config.ReasonDriverNotReady // a CUDA or user-space mismatch, or an unreadable version
		if v.Drift {
			reason = config.ReasonDriverDrift
		}
		return gate.Result{Ready: v.Satisfied, Reason: v.Reason, Labels: labels, Annotations: annotations, ConditionReason: reason}
	}
}

// ToolkitCheck verifies the status record written by `toolkit install`: open only when it
// verified, through containerd's CRI, the drop-in this policy rendered with the policy's
// handler; otherwise the reason is the install's own (what containerd refused, what it runs).
func ToolkitCheck(cfg *config.Agent) gate.CheckFunc {
	return func(f *gate.Facts) gate.Result {
		st, err := f.Host.Toolkit, f.Host.ToolkitErr
		if err != nil {
			// No record: this policy's toolkit stage has not run here yet (pending), unlike a
			// record of a failed install.
			return gate.Result{Reason: err.Error(), ConditionReason: config.ReasonToolkitNotLoaded, Pending: errors.Is(err, hostfacts.ErrNoToolkitStatus)}
		}
		if !st.Verified {
			reason := st.Reason
			if reason == "" {
				reason = fmt.Sprintf("%s records no verification (written by an older gpu-node-agent); the toolkit stage rewrites it", config.ToolkitStatusFile)
			}
			if st.DropInSHA256 != "" && st.DropInSHA256 != cfg.Toolkit.DropInSHA256 {
				return gate.Result{Reason: fmt.Sprintf("the toolkit stage has not applied this policy's drop-in %s yet; its last install (drop-in %s) failed: %s", short(cfg.Toolkit.DropInSHA256), short(st.DropInSHA256), reason), ConditionReason: config.ReasonToolkitInstallFailed}
			}
			return gate.Result{Reason: "toolkit install failed: " + reason, ConditionReason: config.ReasonToolkitInstallFailed}
		}
		if st.DropInSHA256 != cfg.Toolkit.DropInSHA256 {
			return gate.Result{Reason: fmt.Sprintf("containerd has drop-in sha256 %s, the policy rendered %s: the toolkit stage has not applied this policy yet", short(st.DropInSHA256), short(cfg.Toolkit.DropInSHA256)), ConditionReason: config.ReasonToolkitNotLoaded}
		}
		if !slices.Contains(st.Handlers, cfg.Toolkit.RuntimeClassName) {
			return gate.Result{Reason: fmt.Sprintf("containerd loaded handlers %v, not %q", st.Handlers, cfg.Toolkit.RuntimeClassName), ConditionReason: config.ReasonToolkitNotLoaded}
		}
		return gate.Result{Ready: true, Reason: fmt.Sprintf("containerd %s loaded handler %s (drop-in %s, verified by %s)", st.ContainerdVersion, cfg.Toolkit.RuntimeClassName, short(st.DropInSHA256), st.VerifiedBy)}
	}
}

// Why the gate's watches poke (the reasons in its "reconciling" log).
const (
	WhyToolkitStatus = "toolkit status file changed"
	WhyDeviceNodes   = "NVIDIA device nodes changed"
	WhyDriverVersion = "driver version file changed"
	WhyDriverModule  = "NVIDIA kernel module loaded or unloaded"
	WhyMPSStatus     = "MPS control daemon record changed"
)

// WatchDirs are the host directories whose entries the checks read, for the inotify watch of
// the gate and the driver validator: the toolkit status file (replaced by rename, so its
// directory is watched), the NVIDIA device nodes, which appear in /dev (devtmpfs reports them)
// when the driver loads, the driver's version file where it is a plain file (procfs never
// reports it; DriverEvents covers the real one), and the MPS control daemon's record.
func WatchDirs() []wake.Dir {
	return []wake.Dir{
		{Path: filepath.Dir(config.ToolkitStatusFile), Names: []string{filepath.Base(config.ToolkitStatusFile)}, Why: WhyToolkitStatus},
		{Path: "/dev", Names: []string{"nvidia*"}, Why: WhyDeviceNodes},
		{Path: filepath.Dir(hostfacts.KernelDriverFile), Names: []string{filepath.Base(hostfacts.KernelDriverFile)}, Why: WhyDriverVersion},
		{Path: config.MPSHostRoot, Names: []string{config.MPSStatusFileName}, Why: WhyMPSStatus},
	}
}

// DriverEvents pokes t when the NVIDIA kernel modules are loaded or unloaded, until ctx ends:
// the kernel's module uevents. procfs makes hostfacts.KernelDriverFile on each read and never
// reports it to inotify, and an upgrade in place changes the version without new device nodes
// (nvidia-modprobe may make those only when a program opens the GPU), but every driver change
// is an unload and a load of the nvidia module, which the kernel announces. Without the
// uevent socket (a pod with hostUsers: false), the version file is read every
// DriverPollPeriod instead, with a warning.
func DriverEvents(ctx context.Context, log *slog.Logger, t *wake.Trigger, hostRoot string) {
	if err := t.Uevents(ctx, log, wake.Module("nvidia"), WhyDriverModule); err != nil {
		log.Warn("driver loads and unloads are found by polling the version file", "error", err, "period", DriverPollPeriod.String())
		go t.PollFile(ctx, hostRoot, hostfacts.KernelDriverFile, DriverPollPeriod, WhyDriverVersion)
	}
}

// DriverPollPeriod is how often hostfacts.KernelDriverFile is re-read when the kernel's uevents
// cannot be received: reading a 100-byte kernel file every 2s is the cheap bound then.
const DriverPollPeriod = 2 * time.Second

func short(sha string) string {
	if len(sha) > 12 {
		return sha[:12]
	}
	return sha
}
