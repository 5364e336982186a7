package metrics_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gpupolicy/gpupolicy/plugin/exporter/collector"
	"github.com/gpupolicy/gpupolicy/plugin/exporter/metrics"
	"github.com/gpupolicy/gpupolicy/plugin/exporter/podresources"
	"github.com/gpupolicy/gpupolicy/plugin/gpulib/gpumock"
)

// rig is a mock NVML, a collector over it, optionally a pod-resources client, and the handler.
type rig struct {
	mock    *gpumock.Mock
	col     *collector.Collector
	pods    *podresources.Client
	handler http.Handler
}

func newRig(tb testing.TB, mockName, socket string) *rig {
	tb.Helper()
	m, err := gpumock.New(mockName)
	if err != nil {
		tb.Fatal(err)
	}
	if ret := m.Init(); ret != nvml.SUCCESS {
		tb.Fatal(ret)
	}
	col, err := collector.New(m, collector.Config{Interval: time.Hour, Hostname: "node-a", Logger: discardLogger()})
	if err != nil {
		tb.Fatal(err)
	}
	r := &rig{mock: m, col: col}
	src := metrics.Sources{Snapshot: col.Snapshot}
	var stats func() podresources.Stats
	if socket != "" {
		r.pods, err = podresources.New(podresources.Config{Socket: socket, Refresh: time.Hour, Timeout: time.Second})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { _ = r.pods.Close() })
		src.Pods, stats = r.pods.Mapping, r.pods.Stats
	}
	r.handler = metrics.NewGatherer(src, stats).Handler()
	return r
}

// refresh collects NVML once and refreshes the pod mapping once (errors ignored: a broken
// socket is a case under test).
func (r *rig) refresh() {
	r.col.Collect()
	if r.pods != nil {
		_ = r.pods.Refresh(context.Background())
	}
}

func (r *rig) scrapeText(tb testing.TB) string {
	tb.Helper()
	rec := httptest.NewRecorder()
	r.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		tb.Fatalf("scrape: HTTP %d: %s", rec.Code, rec.Body.String())
	}
	return rec.Body.String()
}

func (r *rig) scrape(tb testing.TB) map[string]*dto.MetricFamily {
	tb.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(r.scrapeText(tb)))
	if err != nil {
		tb.Fatal(err)
	}
	return fams
}

func labels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	default:
		return m.GetUntyped().GetValue()
	}
}

// series returns the metrics of family name whose labels include match.
func series(fams map[string]*dto.MetricFamily, name string, match map[string]string) []*dto.Metric {
	var out []*dto.Metric
	for _, m := range fams[name].GetMetric() {
		l := labels(m)
		ok := true
		for k, v := range match {
			if l[k] != v {
				ok = false
				break
			}
		}
		if ok {
			out = append(out, m)
		}
	}
	return out
}

func uuidOf(tb testing.TB, m *gpumock.Mock, i int) string {
	tb.Helper()
	d, ret := m.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		tb.Fatal(ret)
	}
	u, _ := d.GetUUID()
	return u
}

func migUUIDs(tb testing.TB, m *gpumock.Mock, gpu int) []string {
	tb.Helper()
	d, _ := m.DeviceGetHandleByIndex(gpu)
	n, _ := d.GetMaxMigDeviceCount()
	var out []string
	for i := range n {
		md, ret := d.GetMigDeviceHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		u, _ := md.GetUUID()
		out = append(out, u)
	}
	return out
}

func itoa(i int) string { return fmt.Sprint(i) }

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
