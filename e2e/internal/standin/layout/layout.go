// Package layout holds the paths and names the stand-in programs (cmd/standin) and the test
// side (package standin) share. It imports nothing, so the static programs stay free of cgo.
package layout

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
	// WorkloadReady is the line the workload prints after its environment.
	WorkloadReady = "standin-workload: environment printed"

	// ToolkitArtifacts is where the toolkit image holds the binaries its installer copies
	// (ToolkitBinaries) to $TOOLKIT_INSTALL_DIR/toolkit.
	ToolkitArtifacts = "/artifacts/toolkit"
	// ToolkitInstaller is the toolkit image's entrypoint.
	ToolkitInstaller = "/usr/bin/nvidia-ctk-installer"
)
