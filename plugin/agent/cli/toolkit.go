package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"time"

	"github.com/gpupolicy/gpupolicy/plugin/agent/toolkit"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// restartFlags are shared by install and uninstall.
func restartFlags(fs *flag.FlagSet, in *toolkit.Installer) {
	fs.StringVar(&in.RestartMode, "restart-mode", toolkit.RestartSystemd, "how to restart containerd after a change: systemd (systemctl restart --systemd-unit in the host root) | signal (SIGTERM to containerd; its supervisor restarts it; needs hostPID) | none (a person restarts it; the gate stays closed until then)")
	fs.StringVar(&in.SystemdUnit, "systemd-unit", toolkit.DefaultUnit, "containerd's systemd unit (restart-mode systemd)")
	fs.StringVar(&in.ProcDir, "proc", "/proc", "the host's /proc (the DaemonSet runs with hostPID): finds the containerd process restart-mode signal sends SIGTERM to")
	fs.StringVar(&in.ConfigPath, "config-path", toolkit.DefaultConfigPath, "containerd's main config, a host path read under --host-root (spec.containerRuntime.configPath); a symbolic link (Flatcar: -> /usr/share/containerd/config.toml) is merged from and written into the file it names and stays a link; a target that cannot be written (Flatcar's read-only /usr) is refused before anything changes: replace the link with a copy (cp --remove-destination TARGET LINK)")
	fs.StringVar(&in.DropInDir, "drop-in-dir", toolkit.DefaultDropInDir, "directory the drop-in is installed in, a host path under --host-root (spec.containerRuntime.dropInDir); the file is named "+config.DropInFile)
	fs.StringVar(&in.HostRoot, "host-root", "/host", "where the host's / is mounted; every host path (--config-path and its imports, --drop-in-dir, --cdi-spec, the status file) is resolved inside it as the host's kernel would after chroot: absolute symbolic links start again at it, .. never leaves it, and a dangling link or a link loop is refused with its name")
}

func toolkitInstallFlags(fs *flag.FlagSet) func(context.Context, *env) error {
	in := &toolkit.Installer{}
	restartFlags(fs, in)
	fs.StringVar(&in.DropInSource, "drop-in", config.DropInDir+"/"+config.DropInFile, "the rendered drop-in (ConfigMap "+config.DropInConfigMap+" mounted in the container)")
	fs.StringVar(&in.ContainerdVersion, "containerd-version", "", "containerd minor on the node, X.Y (spec.containerRuntime.version); below 2.1 the node's CRI plugin sections are merged into the drop-in; required")
	fs.StringVar(&in.RuntimeClassName, "runtime-class-name", "", "the one containerd runtime handler the drop-in may define (spec.toolkit.runtimeClassName); \"\" (default): the drop-in's only handler; either way a handler of another runtime (runc, crun, kata, ...) is refused")
	fs.StringVar(&in.ContainerdBinary, "containerd-bin", "", "host path of containerd, run as 'containerd config dump' to read the node's effective config (default: found under --host-root in /usr/bin, /usr/local/bin, /bin, /opt/bin; \"none\": read the config files instead)")
	fs.DurationVar(&in.RestartTimeout, "restart-timeout", 90*time.Second, "how long to wait after a restart for a new containerd process to answer on --containerd-socket with the drop-in's handler loaded and RuntimeReady")
	fs.StringVar(&in.ContainerdSocket, "containerd-socket", toolkit.DefaultContainerdSocket, "host path of containerd's gRPC socket (its grpc.address), resolved under --host-root; install calls its CRI RuntimeService.Status (verbose) and verifies only when the running daemon reports the drop-in's handler with the drop-in's settings (runtime_type, options such as BinaryName) and RuntimeReady; unreachable: not verified, the status file says why")
	fs.StringVar(&in.CDISpec, "cdi-spec", "", "generate the node's CDI spec with the node's nvidia-ctk ('nvidia-ctk cdi generate --device-name-strategy=uuid', run chrooted in --host-root), check it names "+config.CDIKind+" devices by UUID, and install it atomically at host path `FILE` (e.g. "+config.CDISpecFile+"; same bytes are not rewritten) before the status file; needed by deviceListStrategy cdi-cri, whose device plugin hands containerd "+config.CDIKind+"=<uuid>; a failure keeps the gate closed; \"\" (default): no CDI spec")
	fs.StringVar(&in.NvidiaCTK, "nvidia-ctk", "", "host path of nvidia-ctk for --cdi-spec; the spec's hooks name the nvidia-cdi-hook next to it (toolkit.source container: "+config.ToolkitInstallDir+"/nvidia-ctk; default: found under --host-root in /usr/bin, /usr/local/bin, /bin, /usr/sbin, /sbin, /opt/bin)")
	fs.StringVar(&in.CDIDriverRoot, "cdi-driver-root", "/", "host path of the driver's root for --cdi-spec, passed to nvidia-ctk as --driver-root (driver.source container: /run/nvidia/driver)")
	watch := fs.Duration("watch", 0, "keep running and re-apply every interval (re-installs if the node drifts; never uninstalls on stop); 0 installs once and exits")
	return func(ctx context.Context, e *env) error {
		if err := checkToolkitFlags(in, true); err != nil {
			return err
		}
		if *watch < 0 {
			return usageError{fmt.Errorf("--watch %s is negative: give 0 (install once and exit) or the interval between re-applies, e.g. 1m", *watch)}
		}
		in.Logger = e.log
		return every(ctx, *watch, e.log, func(ctx context.Context) error {
			res, err := in.Install(ctx)
			if err != nil {
				return err
			}
			if *watch == 0 {
				if err := json.NewEncoder(e.stdout).Encode(res); err != nil {
					return err
				}
			}
			if !res.Verified {
				return fmt.Errorf("not verified: %s", res.Reason)
			}
			if res.Changed || res.Restarted {
				e.log.Info("toolkit stage verified", "stage", config.StageToolkit, "handlers", res.Status.Handlers, "verifiedBy", res.Status.VerifiedBy)
			}
			return nil
		})
	}
}

func toolkitUninstallFlags(fs *flag.FlagSet) func(context.Context, *env) error {
	in := &toolkit.Installer{}
	restartFlags(fs, in)
	fs.StringVar(&in.CDISpec, "cdi-spec", "", "also remove the CDI spec `FILE` (a host path) that toolkit install --cdi-spec installed; \"\" (default): leave CDI specs alone")
	return func(ctx context.Context, e *env) error {
		if err := checkToolkitFlags(in, false); err != nil {
			return err
		}
		in.Logger = e.log
		removed, err := in.Uninstall(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(e.stdout, "removed: %v\n", removed)
		return nil
	}
}

// checkToolkitFlags refuses, before anything on the node is read or written, a flag value
// toolkit install (install true) or uninstall cannot act on: a usage error (exit 2).
func checkToolkitFlags(in *toolkit.Installer, install bool) error {
	if install && in.RestartTimeout == 0 {
		return usageError{fmt.Errorf("--restart-timeout 0s: give how long to wait for containerd after a restart, above 0s and at most %s (default 1m30s)", toolkit.MaxRestartTimeout)}
	}
	if in.SystemdUnit == "" {
		return usageError{fmt.Errorf("--systemd-unit is empty: set containerd's unit (default %s)", toolkit.DefaultUnit)}
	}
	if err := in.Check(install); err != nil {
		return usageError{err}
	}
	return nil
}
