// Package layout holds the paths and names the stand-in programs (cmd/standin) and the test
// side (package standin) share, and the one way both write files. It imports only the
// standard library, so the static programs stay free of cgo (package standin is not: it
// enumerates go-nvml's mock).
package layout

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// WriteFileAtomic writes b to a temporary file next to path and renames it over path, so a
// reader (ctr import, containerd's CDI cache, the kubelet) sees the old file or the whole new one.
func WriteFileAtomic(path string, b []byte, perm fs.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Chmod(perm)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// ToolkitBinaries are the programs the toolkit installer copies, as NVIDIA's does.
var ToolkitBinaries = []string{"nvidia-cdi-hook", "nvidia-container-runtime", "nvidia-ctk"}

const (
	// HostRunc is the runc the nvidia-container-runtime stand-in execs (Debian's).
	HostRunc = "/usr/sbin/runc"
	// RuncEnv overrides HostRunc, for tests only.
	RuncEnv = "GPUPOLICY_E2E_RUNC"

	// RecordDir is where the runtime stand-in records each container's OCI spec
	// (<container-id>.json) and every call (CallLog), and the hook stand-in its calls (HookLog).
	RecordDir = "/var/lib/gpupolicy-e2e/oci"
	// RecordDirEnv overrides RecordDir, for tests only (containerd passes its environment to
	// the shim, and the shim to the runtime).
	RecordDirEnv = "GPUPOLICY_E2E_RECORD_DIR"
	// CallLog is the runtime stand-in's log in RecordDir: one JSON array of arguments a line.
	CallLog = "calls.log"
	// HookLog is the CDI hook stand-in's log in RecordDir: one JSON object a line.
	HookLog = "hooks.log"

	// CDIDeviceEnv is the variable each CDI device of the nvidia-ctk stand-in's spec sets to
	// its UUID (the "all" device: every UUID, comma-separated); CDIDeviceEnv_<index> is set
	// too, so a container given several devices sees each.
	CDIDeviceEnv = "GPUPOLICY_E2E_CDI_DEVICE"

	// EnvPrefix starts each line the workload prints for a variable of its environment.
	EnvPrefix = "standin-env: "
	// PauseReady is the line pause prints on stderr once it catches SIGTERM.
	PauseReady = "pause (gpupolicy e2e stand-in): waiting for SIGTERM or SIGINT"
	// WorkloadReady is the line the workload prints after its environment.
	WorkloadReady = "standin-workload: environment printed"

	// ToolkitArtifacts is where the toolkit image holds the binaries its installer copies
	// (ToolkitBinaries) to $TOOLKIT_INSTALL_DIR/toolkit.
	ToolkitArtifacts = "/artifacts/toolkit"
	// ToolkitInstaller is the toolkit image's entrypoint.
	ToolkitInstaller = "/usr/bin/nvidia-ctk-installer"
)
