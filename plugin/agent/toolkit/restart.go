package toolkit

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpupolicy/gpupolicy/plugin/agent/hostfs"
)

// Restart modes (spec.containerRuntime.restartMode).
const (
	RestartSystemd = "systemd" // systemctl restart <unit> on the host
	RestartSignal  = "signal"  // SIGTERM to containerd; its supervisor starts it again
	RestartNone    = "none"    // a person restarts containerd; the gate waits until then
)

// containerdProcesses lists the PIDs of processes whose command name is "containerd" (not
// the shims): restart-mode signal's targets.
func containerdProcesses(procDir string) ([]int, error) {
	entries, err := os.ReadDir(procDir)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(procDir, e.Name(), "stat"))
		if err != nil {
			continue // exited meanwhile
		}
		// stat: pid (comm) state ... ; comm may contain spaces, so split at the last ')'.
		s := string(stat)
		open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || closing < open || s[open+1:closing] != "containerd" {
			continue
		}
		out = append(out, pid)
	}
	return out, nil
}

// restart restarts containerd per mode and returns the PIDs of the containerd it replaces
// (running is the PID that answered the CRI before, 0 when none did): while one of them
// still answers, the restart has not happened yet.
func (in *Installer) restart(ctx context.Context, running int) ([]int, error) {
	var old []int
	if running > 0 {
		old = append(old, running)
	}
	switch in.RestartMode {
	case RestartNone:
		return old, nil
	case RestartSystemd:
		_, err := in.host().Command(ctx, in.systemctl(), "restart", in.unit())
		return old, err
	case RestartSignal:
		procs, err := containerdProcesses(in.procDir())
		if err != nil {
			return old, err
		}
		if len(procs) == 0 {
			return old, fmt.Errorf("restart-mode signal: no containerd process in %s (the toolkit DaemonSet needs hostPID: true)", in.procDir())
		}
		for _, pid := range procs {
			if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
				return old, fmt.Errorf("signal containerd pid %d: %w", pid, err)
			}
			if !slices.Contains(old, pid) {
				old = append(old, pid)
			}
		}
		return old, nil
	default:
		return old, fmt.Errorf("unknown --restart-mode %q (systemd | signal | none)", in.RestartMode)
	}
}

func (in *Installer) systemctl() string {
	for _, c := range []string{"/usr/bin/systemctl", "/bin/systemctl"} {
		if _, err := hostfs.Stat(in.HostRoot, c); err == nil {
			return c
		}
	}
	return "/usr/bin/systemctl"
}

func (in *Installer) socket() string {
	if in.ContainerdSocket == "" {
		return DefaultContainerdSocket
	}
	return in.ContainerdSocket
}

// runningView asks the running containerd through its CRI whether the drop-in's settings are
// in effect: stale is "" when they are, else what differs; err is a CRI that cannot be
// reached. An answer from a process in old (replaced by a restart) is an error: it is dying.
func (in *Installer) runningView(ctx context.Context, r rendered, v Version, old []int) (view criView, stale string, err error) {
	host, local, err := in.socketPath()
	if err != nil {
		return view, "", err
	}
	if view, err = queryCRI(ctx, host, local); err != nil {
		return view, "", err
	}
	if view.PID > 0 && slices.Contains(old, view.PID) {
		return view, "", fmt.Errorf("containerd pid %d from before the restart still answers on %s", view.PID, host)
	}
	return view, notInEffect(view, r.table, v), nil
}

// waitLoaded waits, up to the restart timeout, for a containerd other than old to answer
// with the drop-in's settings in effect and RuntimeReady. A new process with other settings
// is final: containerd reads its configuration once, at start.
func (in *Installer) waitLoaded(ctx context.Context, r rendered, v Version, old []int) (criView, string, error) {
	deadline := time.Now().Add(in.restartTimeout())
	for {
		view, stale, err := in.runningView(ctx, r, v, old)
		if err == nil && (stale != "" || view.RuntimeReady) {
			return view, stale, nil
		}
		if time.Now().After(deadline) {
			return view, stale, err
		}
		select {
		case <-ctx.Done():
			return view, stale, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
