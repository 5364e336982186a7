package toolkit

import (
	"fmt"
	"regexp"
	"time"
)

// MaxRestartTimeout bounds --restart-timeout: containerd that is not back after this long is
// not coming back by itself, and the DaemonSet's own probes should say so.
const MaxRestartTimeout = 30 * time.Minute

// unitRE is a systemd unit name as systemctl takes it: no leading '-' (it would be read as an
// option of systemctl), no '/' or white space.
var unitRE = regexp.MustCompile(`^[A-Za-z0-9:_.@\\][A-Za-z0-9:_.@\\-]*$`)

// Check refuses settings Install (install true) or Uninstall cannot act on, before either
// reads or writes anything on the node: each error names the flag and the fix. Zero values
// (SystemdUnit "", RestartTimeout 0) are the defaults.
func (in *Installer) Check(install bool) error {
	switch in.RestartMode {
	case RestartSystemd, RestartSignal, RestartNone:
	default:
		return fmt.Errorf("--restart-mode %q is not systemd | signal | none: use systemd (systemctl restart --systemd-unit), signal (SIGTERM to containerd; needs hostPID) or none (restart containerd yourself)", in.RestartMode)
	}
	if in.RestartMode == RestartSystemd && !unitRE.MatchString(in.unit()) {
		return fmt.Errorf("--systemd-unit %q is not a systemd unit name (letters, digits and :_.@\\-, not starting with -): set containerd's unit, e.g. %s", in.SystemdUnit, DefaultUnit)
	}
	if !install {
		return nil
	}
	if in.RestartTimeout < 0 || in.RestartTimeout > MaxRestartTimeout { // 0: the default
		return fmt.Errorf("--restart-timeout %s is out of range: give a duration above 0s and at most %s (default 1m30s)", in.RestartTimeout, MaxRestartTimeout)
	}
	if in.DropInSource == "" {
		return fmt.Errorf("--drop-in is empty: give the rendered drop-in's path (the ConfigMap mount)")
	}
	if in.ContainerdVersion == "" {
		return fmt.Errorf("--containerd-version is required (spec.containerRuntime.version, e.g. 1.7 or 2.1)")
	}
	if _, err := ParseVersion(in.ContainerdVersion); err != nil {
		return err
	}
	return nil
}
