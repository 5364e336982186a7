// Package exporter is gpu-exporter's server: NVML, the collector loop, the pod-resources
// refresher and the HTTP endpoint, wired together from Options. Its command line is
// plugin/exporter/cli.
package exporter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/gpupolicy/gpupolicy/plugin/exporter/collector"
	"github.com/gpupolicy/gpupolicy/plugin/exporter/metrics"
	"github.com/gpupolicy/gpupolicy/plugin/exporter/podresources"
	"github.com/gpupolicy/gpupolicy/plugin/gpulib"
)

// DefaultPodResourcesSocket is where the kubelet serves the pod-resources API.
const DefaultPodResourcesSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// Options configure Serve; plugin/exporter/cli fills them from its flags.
type Options struct {
	Listen string // address of /metrics, /healthz (liveness) and /readyz (XIDs watched, first snapshot taken)
	// PodResourcesSocket is the kubelet's pod-resources socket for the pod/namespace/container
	// labels, listed every PodResourcesRefresh; empty turns attribution off.
	PodResourcesSocket  string
	PodResourcesRefresh time.Duration
	Interval            time.Duration // how often NVML is read into the snapshot scrapes serve
	NVMLMock            string        // a mock NVML's name; empty: libnvidia-ml.so.1
	Hostname            string        // value of the Hostname label
	Logger              *slog.Logger
}

// Serve opens NVML and serves until ctx ends.
func Serve(ctx context.Context, o Options) error {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	lib, err := gpulib.Open(o.NVMLMock)
	if err != nil {
		return err
	}
	defer lib.Shutdown()
	col, err := collector.New(lib, collector.Config{Interval: o.Interval, Hostname: o.Hostname, Logger: log})
	if err != nil {
		return err
	}
	src := metrics.Sources{Snapshot: col.Snapshot}
	var podStats func() podresources.Stats
	var pods *podresources.Client
	if o.PodResourcesSocket != "" {
		if pods, err = podresources.New(podresources.Config{Socket: o.PodResourcesSocket, Refresh: o.PodResourcesRefresh, Logger: log}); err != nil {
			return err
		}
		defer pods.Close()
		src.Pods, podStats = pods.Mapping, pods.Stats
	} else {
		log.Info("pod attribution off (--pod-resources-socket is empty)", "stage", "pod-resources")
	}
	gath := metrics.NewGatherer(src, podStats)

	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", o.Listen, err)
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
	log.Info("serving", "stage", "exporter", "listen", ln.Addr().String(), "interval", o.Interval.String(),
		"podResourcesSocket", o.PodResourcesSocket, "nvmlMock", o.NVMLMock)
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
		select {
		case <-col.Ready():
			_, _ = io.WriteString(w, "ok\n")
		default:
			http.Error(w, "no NVML snapshot yet", http.StatusServiceUnavailable)
		}
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
