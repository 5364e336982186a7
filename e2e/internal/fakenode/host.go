package fakenode

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/gpupolicy/gpupolicy/plugin/agent/toolkit"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// Host is one fake node's host filesystem as the agent reads it under --host-root. The test
// switches a stage on or off by writing the file the real check reads: the kernel module's
// version under /proc for the driver, the status file `toolkit install` writes for the toolkit.
type Host struct {
	Node string
	Root string
	// InstallsToolkit: a running toolkit pod on this node installs the toolkit (writes the
	// status file), as the real container does. Off, the test decides with SetToolkit.
	InstallsToolkit bool
	cfg             *config.Agent
}

const driverVersionFile = "proc/driver/nvidia/version"

// SetDriver writes the loaded kernel module's version in NVIDIA's format; "" unloads it.
func (h *Host) SetDriver(version string) error {
	p := filepath.Join(h.Root, driverVersionFile)
	if version == "" {
		return removeIfExists(p)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	text := fmt.Sprintf("NVRM version: NVIDIA UNIX x86_64 Kernel Module  %s  Tue Sep 30 00:00:00 UTC 2025\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n", version)
	return os.WriteFile(p, []byte(text), 0o644)
}

// SetToolkit writes (ok) or removes the toolkit status file. When ok it records the handler
// and drop-in digest the policy expects, as `gpu-node-agent toolkit install` does after
// containerd loaded the handler.
func (h *Host) SetToolkit(ok bool) error {
	if !ok {
		return removeIfExists(filepath.Join(h.Root, config.ToolkitStatusFile))
	}
	return toolkit.WriteStatus(h.Root, toolkit.Status{
		Verified:          true,
		Handlers:          []string{h.cfg.Toolkit.RuntimeClassName},
		DropInSHA256:      h.cfg.Toolkit.DropInSHA256,
		ContainerdVersion: h.cfg.ContainerRuntime.Version,
		VerifiedBy:        "e2e",
		Time:              time.Now().UTC(),
	})
}

// Ready makes every stage pass: the policy's driver version and a verified toolkit.
func (h *Host) Ready() error {
	return errors.Join(h.SetDriver(h.cfg.Driver.Version), h.SetToolkit(true))
}

func removeIfExists(p string) error {
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// FailToolkit records a failed `toolkit install` for this policy's drop-in, as the installer
// does when containerd refuses the handler: the gate reports ToolkitInstallFailed.
func (h *Host) FailToolkit(reason string) error {
	return toolkit.WriteStatus(h.Root, toolkit.Status{
		Verified:          false,
		Reason:            reason,
		DropInSHA256:      h.cfg.Toolkit.DropInSHA256,
		ContainerdVersion: h.cfg.ContainerRuntime.Version,
		VerifiedBy:        "e2e",
		Time:              time.Now().UTC(),
	})
}

// AddGPU puts an NVIDIA 3D controller at the PCI address on the host's bus, as sysfs shows
// it to `gpu-node-agent discover`.
func (h *Host) AddGPU(address string) error { return h.AddPCIDevice(address, "0x10de", "0x030200") }

// AddPCIDevice puts a PCI function with the vendor and class ids on the host's bus.
func (h *Host) AddPCIDevice(address, vendor, class string) error {
	dir := filepath.Join(h.Root, "sys/bus/pci/devices", address)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return errors.Join(os.WriteFile(filepath.Join(dir, "vendor"), []byte(vendor+"\n"), 0o644),
		os.WriteFile(filepath.Join(dir, "class"), []byte(class+"\n"), 0o644))
}
