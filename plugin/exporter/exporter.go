// Package exporter is the gpu-exporter program: flags, NVML, the collector loop, the
// pod-resources refresher and the HTTP endpoint, wired together. cmd/gpu-exporter only calls Run.
package exporter

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/gpupolicy/gpupolicy/plugin/exporter/collector"
	"github.com/gpupolicy/gpupolicy/plugin/exporter/metrics"
	"github.com/gpupolicy/gpupolicy/plugin/exporter/podresources"
	"github.com/gpupolicy/gpupolicy/plugin/gpulib"
	"github.com/gpupolicy/gpupolicy/plugin/gpulib/gpumock"
)

// DefaultPodResourcesSocket is where the kubelet serves the pod-resources API.
const DefaultPodResourcesSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

type options struct {
	listen, socket, mock, hostname, logLevel string
	interval, podRefresh                     time.Duration
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("gpu-exporter", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.listen, "listen", ":9400", "address to serve /metrics, /healthz (liveness) and /readyz (first NVML snapshot taken) on")
	fs.StringVar(&o.socket, "pod-resources-socket", DefaultPodResourcesSocket,
		"kubelet pod-resources socket for pod/namespace/container labels; empty turns attribution off")
	fs.DurationVar(&o.interval, "interval", 15*time.Second, "how often NVML is read into the snapshot that scrapes serve")
	fs.DurationVar(&o.podRefresh, "pod-resources-refresh", 10*time.Second, "how often the pod-resources List runs in the background")
	fs.StringVar(&o.mock, "nvml-mock", "", "use a mock NVML instead of libnvidia-ml.so.1, for demos and tests only (known: "+strings.Join(gpumock.Names(), ", ")+")")
	fs.StringVar(&o.hostname, "hostname", "", "value of the Hostname label (default: $NODE_NAME, else the host name)")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
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
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q: gpu-exporter takes flags only (see --help)", fs.Args())
	}
	if o.interval < 100*time.Millisecond {
		return nil, fmt.Errorf("--interval %s is too short: use at least 100ms (the policy default is 15s)", o.interval)
	}
	if o.podRefresh < 100*time.Millisecond {
		return nil, fmt.Errorf("--pod-resources-refresh %s is too short: use at least 100ms", o.podRefresh)
	}
	if o.hostname == "" {
		o.hostname = os.Getenv("NODE_NAME")
	}
	if o.hostname == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("cannot determine the Hostname label: set --hostname or NODE_NAME: %w", err)
		}
		o.hostname = h
	}
	return o, nil
}

func newLogger(w io.Writer, level, node string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l})).With("node", node), nil
}

// Run runs the exporter until ctx ends and returns the exit code.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "gpu-exporter:", err)
		return 2
	}
	log, err := newLogger(stderr, o.logLevel, o.hostname)
	if err != nil {
		fmt.Fprintln(stderr, "gpu-exporter:", err)
		return 2
	}
	if err := serve(ctx, o, log, nil); err != nil {
		log.Error("exporter stopped", "stage", "exporter", "error", err)
		return 1
	}
	return 0
}

// serve opens NVML and serves until ctx ends; ready (if not nil) receives the bound address.
func serve(ctx context.Context, o *options, log *slog.Logger, ready chan<- string) error {
	lib, err := gpulib.Open(o.mock)
	if err != nil {
		return err
	}
	defer lib.Shutdown()
	col, err := collector.New(lib, collector.Config{Interval: o.interval, Hostname: o.hostname, Logger: log})
	if err != nil {
		return err
	}
	src := metrics.Sources{Snapshot: col.Snapshot}
	var podStats func() podresources.Stats
	var pods *podresources.Client
	if o.socket != "" {
		if pods, err = podresources.New(podresources.Config{Socket: o.socket, Refresh: o.podRefresh, Logger: log}); err != nil {
			return err
		}
		defer pods.Close()
		src.Pods, podStats = pods.Mapping, pods.Stats
	} else {
		log.Info("pod attribution off (--pod-resources-socket is empty)", "stage", "pod-resources")
	}
	gath := metrics.NewGatherer(src, podStats)

	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", o.listen, err)
	}
	srv := &http.Server{Handler: newMux(gath, col), ReadHeaderTimeout: 10 * time.Second}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() { col.Run(ctx) })
	wg.Go(func() { gath.Run(ctx, 200*time.Millisecond, log) })
	if pods != nil {
		wg.Go(func() { pods.Run(ctx) })
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	log.Info("serving", "stage", "exporter", "listen", ln.Addr().String(), "interval", o.interval.String(),
		"podResourcesSocket", o.socket, "nvmlMock", o.mock)
	if ready != nil {
		ready <- ln.Addr().String()
	}
	select {
	case <-ctx.Done():
	case err = <-serveErr:
	}
	shutCtx, done := context.WithTimeout(context.Background(), 5*time.Second)
	defer done()
	_ = srv.Shutdown(shutCtx)
	cancel()
	wg.Wait()
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("http server: %w", err)
	}
	log.Info("stopped", "stage", "exporter")
	return nil
}

func newMux(gath *metrics.Gatherer, col *collector.Collector) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("/metrics", gath.Handler())
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if col.Snapshot() == nil {
			http.Error(w, "no NVML snapshot yet", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		_, _ = io.WriteString(w, "gpu-exporter: see /metrics\n")
	})
	return mux
}
