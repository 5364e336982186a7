package mps

import (
	"fmt"
	"os"
	"os/exec"
	"strings"

	"golang.org/x/sys/unix"
)

// Control is one MPS control daemon as NVIDIA's control program sees it: its pipe and log
// directories and the GPUs it may use. The device plugin's pool daemon (Daemon) and the DRA
// plugin's per-claim daemons both drive NVIDIA's nvidia-cuda-mps-control through it.
type Control struct {
	Binary  string // nvidia-cuda-mps-control, or a path
	PipeDir string
	LogDir  string
	// VisibleDevices, when set, is the daemon's CUDA_VISIBLE_DEVICES (a claim's UUIDs).
	VisibleDevices string
}

func (c Control) env() []string {
	env := append(os.Environ(), "CUDA_MPS_PIPE_DIRECTORY="+c.PipeDir, "CUDA_MPS_LOG_DIRECTORY="+c.LogDir)
	if c.VisibleDevices != "" {
		env = append(env, "CUDA_VISIBLE_DEVICES="+c.VisibleDevices)
	}
	return env
}

// Start creates the directories and starts the control daemon in the background (-d).
func (c Control) Start() error {
	for _, dir := range []string{c.PipeDir, c.LogDir} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("create %s: %w", dir, err)
		}
	}
	cmd := exec.Command(c.Binary, "-d")
	cmd.Env = c.env()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s -d: %w: %s", c.Binary, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Send sends one command to the control daemon (its protocol is NVIDIA's own; NVIDIA's
// EchoPipeToControl does the same) and returns the answer.
func (c Control) Send(command string) (string, error) {
	cmd := exec.Command(c.Binary)
	cmd.Env = c.env()
	cmd.Stdin = strings.NewReader(command)
	var out, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s <<< %q: %w %s", c.Binary, command, err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(out.String()), nil
}

// Answers reports whether the control daemon runs and answers.
func (c Control) Answers() bool {
	_, err := c.Send("get_default_active_thread_percentage")
	return err == nil
}

// IsTmpfs refuses a shared memory directory that is not memory: the MPS server and its
// clients share it (hostDir names it in the message).
func IsTmpfs(dir, hostDir string) error {
	var fs unix.Statfs_t
	if err := unix.Statfs(dir, &fs); err != nil {
		return fmt.Errorf("%s (the host's %s): %w", dir, hostDir, err)
	}
	if fs.Type != unix.TMPFS_MAGIC {
		return fmt.Errorf("%s (the host's %s) is not a tmpfs (filesystem type %#x): MPS shares memory through it; the host's /run must be a tmpfs, as systemd mounts it", dir, hostDir, fs.Type)
	}
	return nil
}
