package toolkit

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
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

// ticksPerSecond is USER_HZ, 100 on every Linux architecture Kubernetes runs on.
const ticksPerSecond = 100

// process is a running containerd as seen in the host's /proc.
type process struct {
	PID int
	// Started is the process start time, as time since boot.
	Started time.Duration
}

// containerdProcesses lists processes whose command name is "containerd" (not the shims).
func containerdProcesses(procDir string) ([]process, error) {
	entries, err := os.ReadDir(procDir)
	if err != nil {
		return nil, err
	}
	var out []process
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
		fields := strings.Fields(s[closing+1:])
		if len(fields) < 20 {
			continue
		}
		ticks, err := strconv.ParseInt(fields[19], 10, 64) // field 22 overall: starttime
		if err != nil {
			continue
		}
		out = append(out, process{PID: pid, Started: time.Duration(ticks) * time.Second / ticksPerSecond})
	}
	return out, nil
}

// sinceBoot converts a wall-clock time into time since boot, using /proc/uptime.
func sinceBoot(procDir string, t time.Time) (time.Duration, error) {
	b, err := os.ReadFile(filepath.Join(procDir, "uptime"))
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("empty %s/uptime", procDir)
	}
	up, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return 0, err
	}
	return time.Duration(up*float64(time.Second)) - time.Since(t), nil
}

// restart restarts containerd per mode.
func (in *Installer) restart(ctx context.Context) error {
	switch in.RestartMode {
	case RestartNone:
		return nil
	case RestartSystemd:
		_, err := in.host().Command(ctx, in.systemctl(), "restart", in.unit())
		return err
	case RestartSignal:
		procs, err := containerdProcesses(in.procDir())
		if err != nil {
			return err
		}
		if len(procs) == 0 {
			return fmt.Errorf("restart-mode signal: no containerd process in %s (the toolkit DaemonSet needs hostPID: true)", in.procDir())
		}
		for _, p := range procs {
			if err := syscall.Kill(p.PID, syscall.SIGTERM); err != nil {
				return fmt.Errorf("signal containerd pid %d: %w", p.PID, err)
			}
		}
		return nil
	default:
		return fmt.Errorf("unknown --restart-mode %q (systemd | signal | none)", in.RestartMode)
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

// loadedSince waits until a containerd process started after changedAt (or, with restart
// mode none, only checks once). ok=false with no error means containerd is running a config
// older than the files; visible=false means no containerd process is visible at all.
func (in *Installer) loadedSince(ctx context.Context, changedAt time.Time, wait bool) (ok, visible bool, err error) {
	deadline := time.Now().Add(in.restartTimeout())
	for {
		procs, err := containerdProcesses(in.procDir())
		if err != nil {
			return false, false, err
		}
		boundary, err := sinceBoot(in.procDir(), changedAt)
		if err != nil {
			return false, false, err
		}
		for _, p := range procs {
			// Start times and uptime are both in clock ticks: allow their rounding.
			if p.Started >= boundary-2*time.Second/ticksPerSecond {
				return true, true, nil
			}
		}
		if !wait || time.Now().After(deadline) {
			return false, len(procs) > 0, nil
		}
		select {
		case <-ctx.Done():
			return false, false, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}
