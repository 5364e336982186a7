// Package cli is gpu-device-plugin's command line: its flags and manual, the process's
// logging (gRPC's included), NVML opened from --nvml-mock, and the deviceplugin.Manager they
// configure. cmd/gpu-device-plugin only calls Main.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/gpupolicy/gpupolicy/plugin/commonflags"
	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/deviceplugin"
	"github.com/gpupolicy/gpupolicy/plugin/gpulib"
	"github.com/gpupolicy/gpupolicy/plugin/gpulib/gpumock"
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

With allocation: dra the same binary runs as the DRA kubelet plugin instead: see
gpu-device-plugin dra --help.

Usage:
  gpu-device-plugin [flags]
  gpu-device-plugin dra [flags]

Flags:
`

// Main is the gpu-device-plugin command line (without the program name): it parses args, runs until ctx ends and returns the
// exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "dra" {
		return draMain(ctx, args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("gpu-device-plugin", flag.ContinueOnError)
	fs.SetOutput(stderr)
	pluginDir := fs.String("plugin-dir", "/var/lib/kubelet/device-plugins", "the kubelet's device plugin directory; kubelet.sock is watched there and the plugin sockets are created there")
	configFile := fs.String("config", "", "device plugin config (YAML, rendered by gpupolicy-fn into ConfigMap "+config.DevicePluginConfigMap+"[-<pool>]); empty: the GPUPolicy defaults")
	hostRoot := fs.String("host-root", "/", "where the host's root filesystem is mounted; NUMA nodes are read from <host-root>/sys/bus/pci/devices")
	mock := fs.String("nvml-mock", "", "use a mock NVML instead of libnvidia-ml.so.1, for demos and tests only (known: "+strings.Join(gpumock.Names(), ", ")+")")
	probe := fs.Duration("probe-interval", 5*time.Second, "how often each GPU is probed (answers NVML, uncorrected ECC count) for health and recovery")
	nodeName := fs.String("node-name", os.Getenv("NODE_NAME"), "node name for the logs (default $NODE_NAME)")
	common := commonflags.Register(fs)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if common.PrintVersion(stdout, "gpu-device-plugin") {
		return 0
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "gpu-device-plugin: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if err := config.CheckAbsolutePaths(fs, "plugin-dir", "host-root"); err != nil {
		fmt.Fprintf(stderr, "gpu-device-plugin: %v\n", err)
		return 2
	}
	if err := config.CheckInterval("probe-interval", *probe, config.MinProbeInterval, config.MaxProbeInterval, 5*time.Second); err != nil {
		fmt.Fprintf(stderr, "gpu-device-plugin: %v\n", err)
		return 2
	}
	base, err := common.Logger(stderr)
	if err != nil {
		fmt.Fprintf(stderr, "gpu-device-plugin: %v\n", err)
		return 2
	}
	log := base.With("node", *nodeName, "stage", config.StageDevicePlugin)
	routeGRPCLogs(log)
	cfg := config.DefaultDevicePlugin()
	if *configFile != "" {
		if cfg, err = config.LoadDevicePlugin(*configFile); err != nil {
			log.Error("cannot load config", "error", err)
			return 1
		}
	}
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
	m, err := deviceplugin.New(deviceplugin.Options{Lib: lib, Config: cfg, PluginDir: *pluginDir, HostRoot: *hostRoot, Logger: log, ProbeInterval: *probe})
	if err != nil {
		log.Error("cannot start", "error", err)
		return 1
	}
	log.Info("config", "file", *configFile, "pool", cfg.Pool, "resourceName", cfg.ResourceName, "migStrategy", cfg.MIGStrategy,
		"deviceListStrategy", cfg.DeviceListStrategy, "replicas", cfg.Sharing.TimeSlicing.Replicas, "healthChecks", cfg.HealthChecks.Enabled)
	for _, p := range m.Plugins() {
		log.Info("resource", "resource", p.Resource(), "socket", p.Socket())
	}
	if err := m.Run(ctx); err != nil {
		log.Error("device plugin failed", "error", err)
		return 1
	}
	return 0
}
