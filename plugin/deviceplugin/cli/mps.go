package cli

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/deviceplugin/mps"
	"github.com/gpupolicy/gpupolicy/plugin/gpulib"
)

const mpsUsage = `gpu-device-plugin mps-control-daemon runs NVIDIA's MPS control daemon for a pool with
devicePlugin.sharing.mps, as k8s-device-plugin v0.17.4's mps-control-daemon does.

It puts the node's GPUs in EXCLUSIVE_PROCESS compute mode, starts nvidia-cuda-mps-control -d
with CUDA_MPS_PIPE_DIRECTORY=<mps-dir>/<resource>/pipe and CUDA_MPS_LOG_DIRECTORY=<mps-dir>/<resource>/log,
sets each client's defaults as NVIDIA does (active thread percentage 100/replicas, pinned
device memory the GPU's memory/replicas) and creates <mps-dir>/<resource>/.started. Its verdict,
or why the node cannot run MPS (a GPU in MIG mode, no tmpfs at /dev/shm, no control program),
is recorded in <mps-dir>/` + config.MPSStatusFileName + `, which the node agent's check reads before it
opens the device plugin's gate. A control daemon that stops answering is started again. On
SIGTERM it quits the control daemon, puts the GPUs back in DEFAULT compute mode and removes
.started.

Usage:
  gpu-device-plugin mps-control-daemon [flags]

Flags:
`

// mpsFlags are the MPS mode's own flags.
type mpsFlags struct {
	mpsDir, listen *string
	interval       *time.Duration
}

var mpsAbsolute = []string{"mps-dir"}

func mpsCommand(stderr io.Writer) (*command, mpsFlags) {
	c := newCommand("gpu-device-plugin mps-control-daemon", commandHelp{usage: mpsUsage,
		config:   "device plugin config (YAML, ConfigMap " + config.DevicePluginConfigMap + "[-<pool>]) with sharing.mps",
		hostRoot: "where the host's root filesystem is mounted: NUMA nodes are read from its /sys",
		probe:    "unused in this mode (the device plugin's probe interval)",
		nodeName: "node name for the logs (default $NODE_NAME)",
	}, stderr)
	return c, mpsFlags{
		mpsDir:   c.fs.String("mps-dir", config.MPSContainerRoot, "where the host's MPS root ("+config.MPSHostRoot+") is mounted, read-write"),
		listen:   c.fs.String("listen", ":8083", "address of GET /readyz (200 once the node is judged, the record as the body, whatever the verdict) and /healthz (the check loop runs)"),
		interval: c.fs.Duration("interval", 10*time.Second, "how often the control daemon is asked whether it still answers"),
	}
}

func mpsMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c, f := mpsCommand(stderr)
	if code, done := c.parse(args, stdout, stderr, mpsAbsolute...); done {
		return code
	}
	log, cfg, code, done := c.start(stderr, "mode", config.StageMPSControlDaemon)
	if done {
		return code
	}
	lib, err := gpulib.Open(*c.mock)
	if err != nil {
		log.Error("cannot open NVML", "error", err)
		return 1
	}
	defer lib.Shutdown()
	d, err := mps.New(mps.Options{Lib: lib, Config: cfg, Root: *f.mpsDir, HostRoot: *c.hostRoot, Interval: *f.interval, Logger: log})
	if err != nil {
		log.Error("cannot start", "error", err)
		return 1
	}
	if *f.listen != "" {
		ln, err := net.Listen("tcp", *f.listen)
		if err != nil {
			log.Error("cannot listen", "listen", *f.listen, "error", err)
			return 1
		}
		srv := &http.Server{Handler: mpsHealth(d), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
	}
	if err := d.Run(ctx); err != nil {
		log.Error("MPS control daemon failed", "error", err)
		return 1
	}
	return 0
}

// mpsHealth serves /readyz (the node judged; the record as the body) and /healthz.
func mpsHealth(d *mps.Daemon) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		judged, st := d.Ready()
		if !judged {
			http.Error(w, "the node has not been judged yet", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(st)
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if !d.Alive() {
			http.Error(w, "the check loop has stalled", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	return mux
}
