// Package cli is gpu-device-plugin's command line: its flags and manual, the process's
// logging (gRPC's included), NVML opened from --nvml-mock, and the deviceplugin.Manager they
// configure. cmd/gpu-device-plugin only calls Main.
package cli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"

	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/deviceplugin"
	"github.com/gpupolicy/gpupolicy/plugin/gpulib"
)

const usage = `gpu-device-plugin advertises this node's NVIDIA GPUs to the kubelet (deviceplugin/v1beta1).

It serves one socket per resource in --plugin-dir (gpupolicy-<resource>.sock) and registers
whenever the kubelet's kubelet.sock appears there: at start, later, and after every kubelet
restart (retrying with backoff; it never exits because the kubelet went away).

Resources (config): resourceName (nvidia.com/gpu) with device ids = GPU UUIDs; migStrategy
none (whole GPUs), single (every GPU's MIG devices, one profile), mixed (whole GPUs plus
<domain>/mig-<profile>); sharing.timeSlicing.replicas N advertises ids <uuid>::0..N-1;
deviceListStrategy cdi-cri (CDI device nvidia.com/gpu=<uuid>) or envvar (NVIDIA_VISIBLE_DEVICES).

Health: a device turns Unhealthy at once on a critical XID not in healthChecks.ignoredXIDs, a
double-bit ECC event, a rise of its uncorrected ECC count, or an NVML query it cannot answer.
It turns Healthy again when healthChecks.recoveryPeriod (default 2m) has passed since its last
bad signal and the latest probe succeeded.

MPS (sharing.mps.replicas N): ids <uuid>::0..N-1 as under time-slicing; a container gets one
replica, CUDA_MPS_PIPE_DIRECTORY=/mps/<resource>/pipe and the mounts of the control daemon's
pipe directory and /dev/shm (<mps-root>/<resource>/pipe, <mps-root>/shm on the host). The
plugin serves once the daemon's record in --mps-dir says it serves this config.

With allocation: dra the same binary runs as the DRA kubelet plugin instead: see
gpu-device-plugin dra --help; the MPS control daemon of a pool with sharing.mps is
gpu-device-plugin mps-control-daemon --help.

Usage:
  gpu-device-plugin [flags]
  gpu-device-plugin dra [flags]
  gpu-device-plugin mps-control-daemon [flags]

Flags:
`

// Main is the gpu-device-plugin command line (without the program name): it parses args, runs until ctx ends and returns the
// exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "dra" {
		return draMain(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "mps-control-daemon" {
		return mpsMain(ctx, args[1:], stdout, stderr)
	}
	c, f := pluginCommand(stderr)
	pluginDir := f.pluginDir
	if code, done := c.parse(args, stdout, stderr, pluginAbsolute...); done {
		return code
	}
	log, cfg, code, done := c.start(stderr)
	if done {
		return code
	}
	configFile, hostRoot, mock, probe := c.configFile, c.hostRoot, c.mock, c.probe
	if cfg.Allocation == config.AllocationDRA {
		// Both plugins on one node would hand every GPU out twice.
		log.Error("the config's pool is on DRA (allocation: dra): run gpu-device-plugin dra there, not the device plugin", "file", *configFile, "pool", cfg.Pool)
		return 1
	}
	lib, err := gpulib.Open(*mock)
	if err != nil {
		log.Error("cannot open NVML", "error", err)
		return 1
	}
	defer lib.Shutdown()
	m, err := deviceplugin.New(deviceplugin.Options{Lib: lib, Config: cfg, PluginDir: *pluginDir, HostRoot: *hostRoot, Logger: log, ProbeInterval: *probe,
		MPSHostRoot: *f.mpsRoot, MPSDir: *f.mpsDir})
	if err != nil {
		log.Error("cannot start", "error", err)
		return 1
	}
	strategy, replicas := cfg.Sharing.Strategy()
	log.Info("config", "file", *configFile, "pool", cfg.Pool, "resourceName", cfg.ResourceName, "migStrategy", cfg.MIGStrategy,
		"deviceListStrategy", cfg.DeviceListStrategy, "sharing", strategy, "replicas", replicas, "healthChecks", cfg.HealthChecks.Enabled)
	for _, p := range m.Plugins() {
		log.Info("resource", "resource", p.Resource(), "socket", p.Socket())
	}
	if err := m.Run(ctx); err != nil {
		log.Error("device plugin failed", "error", err)
		return 1
	}
	return 0
}

// pluginFlags are the device plugin mode's own flags.
type pluginFlags struct{ pluginDir, mpsRoot, mpsDir *string }

// pluginCommand is the device plugin mode's flag set: the shared flags and its own.
func pluginCommand(stderr io.Writer) (c *command, f pluginFlags) {
	c = newCommand("gpu-device-plugin", commandHelp{usage: usage,
		config:   "device plugin config (YAML, rendered by gpupolicy-fn into ConfigMap " + config.DevicePluginConfigMap + "[-<pool>]); empty: the GPUPolicy defaults",
		hostRoot: "where the host's root filesystem is mounted; NUMA nodes are read from <host-root>/sys/bus/pci/devices",
		probe:    "how often each GPU is probed (answers NVML, uncorrected ECC count) for health and recovery",
		nodeName: "node name for the logs (default $NODE_NAME)",
	}, stderr)
	f.pluginDir = c.fs.String("plugin-dir", "/var/lib/kubelet/device-plugins", "the kubelet's device plugin directory; kubelet.sock is watched there and the plugin sockets are created there")
	f.mpsRoot = c.fs.String("mps-root", config.MPSHostRoot, "with sharing.mps: the host's MPS root, whose <resource>/pipe and shm directories containers get mounted (k8s-device-plugin's --mps-root)")
	f.mpsDir = c.fs.String("mps-dir", config.MPSContainerRoot, "with sharing.mps: where --mps-root is mounted in this container; the control daemon's record is read there")
	return c, f
}

// pluginAbsolute are the device plugin mode's flags that must be absolute paths.
var pluginAbsolute = []string{"plugin-dir", "mps-root", "mps-dir"}

// CheckArgs parses a command line (without the program name) exactly as Main does, with the
// same flag sets and checks, and runs nothing: the rendered DaemonSets' args are tested with it.
func CheckArgs(args []string) error {
	var out bytes.Buffer
	var c *command
	absolute := pluginAbsolute
	switch {
	case len(args) > 0 && args[0] == "dra":
		c, _ = draCommand(&out)
		args, absolute = args[1:], draAbsolute
	case len(args) > 0 && args[0] == "mps-control-daemon":
		c, _ = mpsCommand(&out)
		args, absolute = args[1:], mpsAbsolute
	default:
		c, _ = pluginCommand(&out)
	}
	if code, done := c.parse(args, &out, &out, absolute...); done && code != 0 {
		return errors.New(strings.TrimSpace(out.String()))
	}
	return nil
}
