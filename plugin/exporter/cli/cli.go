// Package cli is gpu-exporter's command line: its flags and manual, the checks on their
// values, and the logger; plugin/exporter serves with the options they make.
// cmd/gpu-exporter only calls Main.
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
	"github.com/gpupolicy/gpupolicy/plugin/exporter"
	"github.com/gpupolicy/gpupolicy/plugin/gpulib/gpumock"
)

// parseFlags returns the exporter's options and the flags every node program shares.
func parseFlags(args []string, stderr io.Writer) (o exporter.Options, common *commonflags.Flags, err error) {
	fs := flag.NewFlagSet("gpu-exporter", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.Listen, "listen", ":9400", "address to serve /metrics, /healthz (liveness) and /readyz (XID events registered and the first NVML snapshot taken) on")
	fs.StringVar(&o.PodResourcesSocket, "pod-resources-socket", exporter.DefaultPodResourcesSocket,
		"kubelet pod-resources socket for pod/namespace/container labels; empty turns attribution off")
	fs.DurationVar(&o.Interval, "interval", 15*time.Second, "how often NVML is read into the snapshot that scrapes serve")
	fs.DurationVar(&o.PodResourcesRefresh, "pod-resources-refresh", 10*time.Second, "how often the pod-resources List runs in the background")
	fs.StringVar(&o.NVMLMock, "nvml-mock", "", "use a mock NVML instead of libnvidia-ml.so.1, for demos and tests only (known: "+strings.Join(gpumock.Names(), ", ")+")")
	fs.StringVar(&o.Hostname, "hostname", "", "value of the Hostname label (default: $NODE_NAME, else the host name)")
	common = commonflags.Register(fs)
	fs.Usage = func() {
		fmt.Fprint(stderr, `Usage: gpu-exporter [flags]

Serves NVIDIA GPU metrics for Prometheus with dcgm-exporter's metric and label names, read from
NVML on an interval (a scrape never waits on NVML), with pod/namespace/container labels from the
kubelet pod-resources API (cached; no gRPC call per scrape) and gpupolicy_gpu_up per GPU.

Flags:
`)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, nil, err
	}
	if fs.NArg() > 0 {
		return o, nil, fmt.Errorf("unexpected arguments %q: gpu-exporter takes flags only (see --help)", fs.Args())
	}
	if err := commonflags.CheckAbsolutePaths(fs, "pod-resources-socket"); err != nil {
		return o, nil, err
	}
	if err := config.CheckInterval("interval", o.Interval, config.MinExporterInterval, config.MaxExporterInterval, 15*time.Second); err != nil {
		return o, nil, fmt.Errorf("%w: the bounds of spec.exporter.interval, which is also the scrape interval", err)
	}
	if o.PodResourcesRefresh < 100*time.Millisecond {
		return o, nil, fmt.Errorf("--pod-resources-refresh %s is too short: use at least 100ms", o.PodResourcesRefresh)
	}
	if o.Hostname == "" {
		o.Hostname = os.Getenv("NODE_NAME")
	}
	if o.Hostname == "" {
		h, err := os.Hostname()
		if err != nil {
			return o, nil, fmt.Errorf("cannot determine the Hostname label: set --hostname or NODE_NAME: %w", err)
		}
		o.Hostname = h
	}
	return o, common, nil
}

// Main is the gpu-exporter command line (without the program name): it parses args, serves
// until ctx ends and returns the exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, common, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "gpu-exporter:", err)
		return 2
	}
	if common.PrintVersion(stdout, "gpu-exporter") {
		return 0
	}
	log, err := common.Logger(stderr)
	if err != nil {
		fmt.Fprintln(stderr, "gpu-exporter:", err)
		return 2
	}
	o.Logger = log.With("node", o.Hostname)
	if err := exporter.Serve(ctx, o); err != nil {
		o.Logger.Error("exporter stopped", "stage", "exporter", "error", err)
		return 1
	}
	return 0
}

// CheckArgs parses a command line (without the program name) exactly as Main does, with the
// same flag set and checks, and runs nothing: the rendered DaemonSet's args are tested with it.
func CheckArgs(args []string) error {
	_, _, err := parseFlags(args, io.Discard)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}
