package toolkit

import (
	"fmt"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/gpupolicy/gpupolicy/plugin/config"
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
	if err := config.CheckContainerdMinor("--containerd-version", in.ContainerdVersion); err != nil {
		return fmt.Errorf("%w (spec.containerRuntime.version)", err)
	}
	if in.RuntimeClassName != "" && config.IsNodeRuntime(in.RuntimeClassName) {
		return config.NodeRuntimeError("--runtime-class-name", in.RuntimeClassName)
	}
	return checkDropInDir(in.ConfigPath, in.DropInDir)
}

// checkDropInDir refuses a drop-in directory that is the main config's directory or above it:
// the import of DIR/*.toml would load config.toml itself (and every other file there) as a
// drop-in.
func checkDropInDir(configPath, dropInDir string) error {
	if configPath == "" {
		configPath = DefaultConfigPath
	}
	if dropInDir == "" {
		dropInDir = DefaultDropInDir
	}
	cfgDir, dir := path.Clean(path.Dir(configPath)), path.Clean(dropInDir)
	if dir == cfgDir || dir == "/" || strings.HasPrefix(cfgDir, dir+"/") {
		return fmt.Errorf("--drop-in-dir %s is the directory of --config-path %s or above it: the import %q would load config.toml itself and every .toml file there as drop-ins; use a directory of its own below it, e.g. %s (spec.containerRuntime.dropInDir)",
			dropInDir, configPath, path.Join(dir, "*.toml"), path.Join(cfgDir, "conf.d"))
	}
	return nil
}

// checkHandlers refuses a rendered drop-in whose runtime handlers are not the one handler
// gpupolicy installs: more than one, another runtime's (runc, kata, ...), not
// --runtime-class-name when that is set, or a default_runtime_name other than that handler
// (spec.toolkit.setAsDefault makes it the handler itself).
func (in *Installer) checkHandlers(t table) error {
	handlers := runtimesIn(t)
	src := "--drop-in " + in.DropInSource
	switch {
	case len(handlers) == 0:
		return fmt.Errorf("%s defines no containerd runtime handler (plugins.<cri plugin>.containerd.runtimes.<name>): mount the rendered ConfigMap %s", src, config.DropInConfigMap)
	case len(handlers) > 1:
		return fmt.Errorf("%s defines runtime handlers %s: gpupolicy installs one, spec.toolkit.runtimeClassName; re-render the policy and mount ConfigMap %s unedited", src, strings.Join(handlers, ", "), config.DropInConfigMap)
	}
	h := handlers[0]
	if config.IsNodeRuntime(h) {
		return fmt.Errorf("%s: %w", src, config.NodeRuntimeError("runtime handler", h))
	}
	if in.RuntimeClassName != "" && h != in.RuntimeClassName {
		return fmt.Errorf("%s defines runtime handler %q, not --runtime-class-name %q: render the drop-in and the flag from one policy (spec.toolkit.runtimeClassName)", src, h, in.RuntimeClassName)
	}
	for name, pt := range subTable(t, "plugins") {
		p, _ := pt.(table)
		if d, ok := subTable(p, "containerd")["default_runtime_name"]; ok && d != h {
			return fmt.Errorf("%s sets plugins.%q.containerd.default_runtime_name = %v: the drop-in may make only its own handler %q the default (spec.toolkit.setAsDefault); re-render the policy and mount ConfigMap %s unedited", src, name, d, h, config.DropInConfigMap)
		}
	}
	return nil
}
