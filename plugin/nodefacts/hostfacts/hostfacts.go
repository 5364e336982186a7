// Package hostfacts reads the node facts that live in host files: the loaded NVIDIA kernel
// module's version, the toolkit stage's record (config.ToolkitStatusFile) and the MPS control
// daemon's (config.MPSStatusFile). It links no NVML
// on purpose: the unprivileged gate reads it, and so do test binaries that link Go's plugin
// package (through kustomize), which the linker marks BIND_NOW; go-nvml's symbols, resolved
// only when libnvidia-ml.so.1 is opened, would abort such a binary at start-up.
package hostfacts

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"strings"

	"github.com/gpupolicy/gpupolicy/plugin/agent/hostfs"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// KernelDriverFile is the loaded kernel module's version file (host path).
const KernelDriverFile = "/proc/driver/nvidia/version"

// ErrNoDriver means the kernel module is not loaded (KernelDriverFile is absent).
var ErrNoDriver = errors.New("NVIDIA kernel module not loaded: " + KernelDriverFile + " is missing (driver stage not done, or --host-root does not mount the host's /proc)")

// ErrNoToolkitStatus means the toolkit stage has not completed on this node.
var ErrNoToolkitStatus = errors.New("no toolkit status file: `gpu-node-agent toolkit install` has not verified containerd on this node yet")

// "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue Sep ..." and the open
// module's "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build ...".
var kernelVersionRE = regexp.MustCompile(`NVRM version:.*?\s(\d+\.\d+(?:\.\d+)?)\s`)

// Facts is one reading of the host files the gate judges a node by: the loaded kernel
// module's driver version and the toolkit stage's record. They need no NVML, so the gate
// stays unprivileged and runs before the toolkit exists. A fact that could not be read holds
// its error instead (ErrNoDriver, ErrNoToolkitStatus when the file is absent).
type Facts struct {
	KernelDriver    string // "580.95.05"
	KernelModules   string // open | proprietary: which flavour of the module is loaded
	KernelDriverErr error
	Toolkit         config.ToolkitStatus
	ToolkitErr      error
	// MPS is the MPS control daemon's record (config.MPSStatusFile under config.MPSHostRoot)
	// and MPSPipeErr whether the pipe of the resource it serves is there.
	MPS        config.MPSStatus
	MPSErr     error
	MPSPipeErr error
}

// Read reads the host facts under hostRoot.
func Read(hostRoot string) Facts {
	var h Facts
	var m KernelModule
	m, h.KernelDriverErr = ReadKernelModule(hostRoot)
	h.KernelDriver, h.KernelModules = m.Version, m.Type
	h.Toolkit, h.ToolkitErr = ReadToolkitStatus(hostRoot)
	h.MPS, h.MPSErr = config.ReadMPSStatus(config.MPSHostRoot, func(p string) ([]byte, error) { return hostfs.ReadFile(hostRoot, p) })
	if h.MPSErr == nil {
		h.MPSPipeErr = config.MPSPipe(config.MPSHostRoot, h.MPS.Resource, func(p string) (fs.FileInfo, error) { return hostfs.Stat(hostRoot, p) })
	}
	return h
}

// KernelModule is the loaded NVIDIA kernel module: its driver version and flavour.
type KernelModule struct {
	Version string // "580.95.05"
	Type    string // open | proprietary (config.KernelModulesOpen, KernelModulesProprietary)
}

// ReadKernelDriver reads the loaded kernel module's version under hostRoot.
func ReadKernelDriver(hostRoot string) (string, error) {
	m, err := ReadKernelModule(hostRoot)
	return m.Version, err
}

// ReadKernelModule reads the loaded kernel module's version and flavour under hostRoot: the
// open modules say "Open Kernel Module" in their version line, the proprietary ones do not.
func ReadKernelModule(hostRoot string) (KernelModule, error) {
	b, err := hostfs.ReadFile(hostRoot, KernelDriverFile)
	if errors.Is(err, fs.ErrNotExist) {
		return KernelModule{}, ErrNoDriver
	}
	if err != nil {
		return KernelModule{}, err
	}
	m := kernelVersionRE.FindSubmatch(append(b, '\n'))
	if m == nil {
		return KernelModule{}, fmt.Errorf("%s: no driver version in %q", KernelDriverFile, strings.SplitN(string(b), "\n", 2)[0])
	}
	k := KernelModule{Version: string(m[1]), Type: config.KernelModulesProprietary}
	if openModuleRE.Match(b) {
		k.Type = config.KernelModulesOpen
	}
	return k, nil
}

// openModuleRE finds the open module's version line.
var openModuleRE = regexp.MustCompile(`NVRM version:[^\n]*Open Kernel Module`)

// ReadToolkitStatus reads config.ToolkitStatusFile under hostRoot.
func ReadToolkitStatus(hostRoot string) (config.ToolkitStatus, error) {
	var st config.ToolkitStatus
	b, err := hostfs.ReadFile(hostRoot, config.ToolkitStatusFile)
	if errors.Is(err, fs.ErrNotExist) {
		return st, ErrNoToolkitStatus
	}
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return config.ToolkitStatus{}, fmt.Errorf("%s is not valid JSON: %w (remove it; the toolkit stage rewrites it)", config.ToolkitStatusFile, err)
	}
	return st, nil
}
