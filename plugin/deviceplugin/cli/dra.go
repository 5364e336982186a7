package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/draplugin"
	"github.com/gpupolicy/gpupolicy/plugin/gpulib"
)

const draUsage = `gpu-device-plugin dra is the DRA kubelet plugin of driver gpu.nvidia.com (allocation: dra).

It publishes this node's GPUs (MIG off) and MIG devices as a ResourceSlice of pool <node name>
with the attribute names of NVIDIA's DRA driver: type (gpu | mig), uuid, productName, brand,
architecture, cudaComputeCapability, driverVersion, cudaDriverVersion,
resource.kubernetes.io/pciBusID and pcieRoot, capacity memory; MIG devices add parentUUID,
parentIndex, profile and the capacities multiprocessors, copyEngines, decoders, encoders,
jpegEngines, ofaEngines. It registers with the kubelet through --registry-dir (the kubelet
finds the socket again after it restarts) and serves NodePrepareResources under
--plugins-dir/gpu.nvidia.com: each prepared claim gets one CDI spec
--cdi-dir/k8s.gpu.nvidia.com-claim_<uid>.json (kind k8s.gpu.nvidia.com/claim, devices
<uid>-<device>); unprepare removes it.

Sharing per claim: opaque config of driver gpu.nvidia.com in the claim or its DeviceClass,
NVIDIA's resource.nvidia.com/v1beta1 GpuConfig (whole GPUs) or MigDeviceConfig (MIG devices),
the claim's over the class's. sharing.strategy TimeSlicing sets each GPU's time-slice
(timeSlicingConfig.interval Default|Short|Medium|Long, with nvidia-smi compute-policy); MPS
starts one MPS control daemon for the config's devices (mpsConfig.defaultActiveThreadPercentage,
defaultPinnedDeviceMemoryLimit, defaultPerDevicePinnedMemoryLimit) and gives each container
CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps with its pipe and shared memory. Unprepare undoes both.
A config of another kind or version, with an unknown field, or that conflicts (TimeSlicing with
mpsConfig, a GpuConfig for a MIG device) refuses the claim: the error goes to the kubelet and an
Event on the ResourceClaim.

Health: the device plugin's rules (healthChecks in --config); an unhealthy device, or every MIG
device of an unhealthy GPU, is withdrawn from the ResourceSlice until it recovers, and a claim
that names it is not prepared.

Usage:
  gpu-device-plugin dra [flags]

Flags:
`

// draMain is `gpu-device-plugin dra`.
// draFlags are the DRA mode's own flags.
type draFlags struct{ pluginsDir, registryDir, cdiDir, kubeconfig, mpsDir, mpsRoot *string }

// draAbsolute are the DRA mode's flags that must be absolute paths.
var draAbsolute = []string{"plugins-dir", "registry-dir", "cdi-dir", "mps-dir", "mps-root"}

// draCommand is the DRA mode's flag set: the shared flags and its own.
func draCommand(stderr io.Writer) (*command, draFlags) {
	c := newCommand("gpu-device-plugin dra", commandHelp{usage: draUsage,
		config:   "device plugin config (YAML, ConfigMap " + config.DevicePluginConfigMap + "[-<pool>]): its healthChecks apply; empty: the GPUPolicy defaults",
		hostRoot: "where the host's root filesystem is mounted: its /sys gives PCIe roots, its /dev the device nodes",
		probe:    "how often each GPU is probed for health and recovery",
		nodeName: "this node's name: the ResourceSlice's node and pool (default $NODE_NAME)",
	}, stderr)
	return c, draFlags{
		pluginsDir:  c.fs.String("plugins-dir", "/var/lib/kubelet/plugins", "the kubelet's plugins directory; the DRA socket is <dir>/"+config.DRADriverName+"/dra.sock"),
		registryDir: c.fs.String("registry-dir", "/var/lib/kubelet/plugins_registry", "the kubelet's plugin registration directory"),
		cdiDir:      c.fs.String("cdi-dir", "/var/run/cdi", "the host's CDI spec directory, where containerd reads the per-claim specs"),
		kubeconfig:  c.fs.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig file (default: in-cluster service account)"),
		mpsDir:      c.fs.String("mps-dir", config.MPSContainerRoot, "where --mps-root is mounted here, read-write: a claim's MPS control daemon keeps its pipe, log and shared memory in <mps-dir>/dra/<id>"),
		mpsRoot:     c.fs.String("mps-root", config.MPSHostRoot, "the host's MPS root, whose dra/<id>/pipe and shm directories a claim's containers get mounted"),
	}
}

func draMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c, f := draCommand(stderr)
	pluginsDir, registryDir, cdiDir, kubeconfig := f.pluginsDir, f.registryDir, f.cdiDir, f.kubeconfig
	if code, done := c.parse(args, stdout, stderr, draAbsolute...); done {
		return code
	}
	if *c.nodeName == "" {
		return c.usage(stderr, errors.New("--node-name (or $NODE_NAME) is required: the ResourceSlice belongs to one node"))
	}
	log, cfg, code, done := c.start(stderr, "allocation", config.AllocationDRA)
	if done {
		return code
	}
	if *c.configFile != "" && cfg.Allocation != config.AllocationDRA {
		// Both plugins on one node would hand every GPU out twice.
		log.Error("the config's pool is served by the device plugin (no allocation: dra): run gpu-device-plugin without dra there", "file", *c.configFile, "pool", cfg.Pool)
		return 1
	}
	client, err := kubeClient(*kubeconfig)
	if err != nil {
		log.Error("cannot reach the API server", "error", err)
		return 1
	}
	lib, err := gpulib.Open(*c.mock)
	if err != nil {
		log.Error("cannot open NVML", "error", err)
		return 1
	}
	defer lib.Shutdown()
	d, err := draplugin.New(draplugin.Options{Lib: lib, Config: cfg, KubeClient: client, NodeName: *c.nodeName,
		PluginsDir: *pluginsDir, RegistryDir: *registryDir, CDIDir: *cdiDir, HostRoot: *c.hostRoot, ProbeInterval: *c.probe, Logger: log,
		MPSDir: *f.mpsDir, MPSHostRoot: *f.mpsRoot})
	if err != nil {
		log.Error("cannot start", "error", err)
		return 1
	}
	if err := d.Run(ctx); err != nil {
		log.Error("DRA plugin failed", "error", err)
		return 1
	}
	return 0
}

func kubeClient(kubeconfig string) (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		if kubeconfig == "" {
			return nil, fmt.Errorf("no Kubernetes credentials: not running in a pod (KUBERNETES_SERVICE_HOST unset) and no --kubeconfig given: %w", err)
		}
		return nil, fmt.Errorf("load --kubeconfig %s: %w", kubeconfig, err)
	}
	cfg.UserAgent = "gpu-device-plugin-dra"
	return kubernetes.NewForConfig(cfg)
}
