package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"time"
)

// MPS sharing (devicePlugin.sharing.mps): NVIDIA's MPS control daemon runs on the node, one
// per resource, and every container given a replica of a GPU talks to it through its pipe
// directory. The layout under the MPS root is k8s-device-plugin v0.17.4's
// (cmd/mps-control-daemon/mps/root.go), so a runbook or a client image written for NVIDIA's
// daemon finds the same paths: <root>/<resource>/pipe, <root>/<resource>/log,
// <root>/<resource>/.started and <root>/shm.
const (
	// StageMPSControlDaemon is the stage (and the agent's check, Gates) of the MPS control
	// daemon: between the MIG step and the device plugin, which hands out MPS replicas only
	// once the daemon of its node answers.
	StageMPSControlDaemon = "mps-control-daemon"
	// LabelDeployMPSControlDaemon admits the daemon (DaemonSet gpu-mps-control-daemon[-<pool>]).
	LabelDeployMPSControlDaemon = LabelDeployPrefix + "mps-control-daemon"
	DaemonSetMPSControlDaemon   = "gpu-mps-control-daemon"

	// MPSHostRoot is the MPS root on the host: NVIDIA's default (the helm chart's mps.root, the
	// GPU Operator's DefaultMPSRoot). /run is a tmpfs, so <root>/shm, the daemon's and its
	// clients' /dev/shm, is memory as NVIDIA's mount-shm makes it, without a privileged mount.
	MPSHostRoot = "/run/nvidia/mps"
	// MPSContainerRoot is where the daemon and the device plugin mount MPSHostRoot
	// (NVIDIA's mps.ContainerRoot).
	MPSContainerRoot = "/mps"
	// MPSStatusFileName is the daemon's record under the root, read by the agent's check.
	MPSStatusFileName = "gpupolicy-mps-status.json"
	// MPSControlBinary is NVIDIA's MPS control program, which the nvidia runtime injects from
	// the driver (nvidia-ctk's CDI spec lists it among the driver's binaries).
	MPSControlBinary = "nvidia-cuda-mps-control"
	// MaxMPSClients bounds sharing.mps.replicas: the MPS server of Volta and newer GPUs accepts
	// at most 48 client CUDA contexts per GPU; a 49th replica's process would fail to start.
	MaxMPSClients = 48

	// GPUStackReady reasons of the MPS check: the daemon has not recorded a verdict yet, or
	// it cannot serve the node's pool.
	ReasonMPSPending  = "MPSPending"
	ReasonMPSNotReady = "MPSNotReady"
)

// MPSPipeDir is a resource's pipe directory under root (CUDA_MPS_PIPE_DIRECTORY).
func MPSPipeDir(root, resource string) string { return path.Join(root, resource, "pipe") }

// MPSLogDir is a resource's log directory under root (CUDA_MPS_LOG_DIRECTORY).
func MPSLogDir(root, resource string) string { return path.Join(root, resource, "log") }

// MPSStartedFile is NVIDIA's marker of a started daemon.
func MPSStartedFile(root, resource string) string { return path.Join(root, resource, ".started") }

// MPSShmDir is the shared memory directory of the daemon and its clients (their /dev/shm).
func MPSShmDir(root string) string { return path.Join(root, "shm") }

// MPSStatusFile is the daemon's record under root.
func MPSStatusFile(root string) string { return path.Join(root, MPSStatusFileName) }

// MPSStatus is the record the MPS control daemon (gpu-device-plugin mps-control-daemon) keeps
// in MPSStatusFile: what it runs, or why it cannot. The agent's check opens the device plugin
// gate by it; a node problem (a GPU in MIG mode, no tmpfs for /dev/shm, the driver's control
// program missing) goes there, into the gate and the GPUStackReady condition, not into a
// crash loop.
type MPSStatus struct {
	Ready bool `json:"ready"`
	// Reason is why the daemon is not running ("" when Ready).
	Reason   string `json:"reason,omitempty"`
	Pool     string `json:"pool,omitempty"`
	Resource string `json:"resource"`
	Replicas int    `json:"replicas"`
	// GPUs are the UUIDs under the daemon, in EXCLUSIVE_PROCESS compute mode.
	GPUs []string `json:"gpus,omitempty"`
	// ActiveThreadPercentage and PinnedMemoryLimits are the defaults each client gets, as
	// NVIDIA's daemon sets them: 100/replicas, and each GPU's memory/replicas ("<index>":
	// "<MiB>M").
	ActiveThreadPercentage int               `json:"activeThreadPercentage,omitempty"`
	PinnedMemoryLimits     map[string]string `json:"pinnedMemoryLimits,omitempty"`
	Time                   time.Time         `json:"time"`
}

// Serves says why st, the daemon's record, does not serve dp's MPS sharing (nil when it
// does): a record of another pool, resource or replica count is a daemon that has not applied
// this configuration yet.
func (st MPSStatus) Serves(dp DevicePlugin) error {
	want := dp.Sharing.MPS
	switch {
	case want == nil:
		return nil
	case !st.Ready:
		return fmt.Errorf("the MPS control daemon cannot serve this node: %s", st.Reason)
	case st.Pool != dp.Pool || st.Resource != dp.ResourceName || st.Replicas != want.Replicas:
		return fmt.Errorf("the MPS control daemon serves %s with %d replicas (pool %q), the pool's config asks for %s with %d (pool %q): it has not applied this config yet",
			st.Resource, st.Replicas, st.Pool, dp.ResourceName, want.Replicas, dp.Pool)
	}
	return nil
}

// ReadMPSStatus reads the daemon's record under root (the MPS root as the reader mounts it;
// readFile is the reader's: the agent resolves host paths under its host root). A missing
// record is an error wrapping fs.ErrNotExist: the daemon has not run on the node.
func ReadMPSStatus(root string, readFile func(string) ([]byte, error)) (MPSStatus, error) {
	var st MPSStatus
	file := MPSStatusFile(root)
	b, err := readFile(file)
	if errors.Is(err, fs.ErrNotExist) {
		return st, fmt.Errorf("no %s: the MPS control daemon (DaemonSet %s) has not run on this node yet: %w", file, DaemonSetMPSControlDaemon, fs.ErrNotExist)
	}
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return MPSStatus{}, fmt.Errorf("%s is not valid JSON: %w (the MPS control daemon rewrites it)", file, err)
	}
	return st, nil
}

// MPSPipe checks that the resource's control pipe exists under root: the daemon runs.
func MPSPipe(root, resource string, stat func(string) (fs.FileInfo, error)) error {
	control := path.Join(MPSPipeDir(root, resource), "control")
	if _, err := stat(control); err != nil {
		return fmt.Errorf("the MPS control daemon's pipe %s is not there (%v): the daemon is not running", control, err)
	}
	return nil
}

// MPSServes says why the daemon's record under root does not serve dp (nil when it does and
// the resource's control pipe exists).
func MPSServes(root string, dp DevicePlugin, readFile func(string) ([]byte, error), stat func(string) (fs.FileInfo, error)) error {
	st, err := ReadMPSStatus(root, readFile)
	if err != nil {
		return err
	}
	if err := st.Serves(dp); err != nil {
		return err
	}
	return MPSPipe(root, dp.ResourceName, stat)
}
