// Package metrics turns collector snapshots and the pod-resources mapping into Prometheus
// metrics with dcgm-exporter's names and labels, plus this project's GPU health and self
// metrics. The GPU families are built once per (snapshot, mapping) pair and reused by every
// scrape until either changes, so a scrape costs only the encoding.
package metrics

import (
	"math"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpupolicy/gpupolicy/plugin/exporter/collector"
	"github.com/gpupolicy/gpupolicy/plugin/exporter/podresources"
)

// Sources are where the metrics come from. Pods may be nil (attribution off).
type Sources struct {
	Snapshot func() *collector.Snapshot
	Pods     func() *podresources.Mapping
}

// gpuCollector emits the metrics of one snapshot.
type gpuCollector struct {
	snap  *collector.Snapshot
	pods  *podresources.Mapping
	field [collector.NumFields]*prometheus.Desc

	up, lastErr, xidTotal, xidLast, driver  *prometheus.Desc
	duration, collections, lastRun, nvmlErr *prometheus.Desc
}

func newGPUCollector() *gpuCollector {
	c := &gpuCollector{
		up:          prometheus.NewDesc(NameGPUUp, "1 when NVML answers for the GPU, 0 when it is lost (fell off the bus) or needs a reset.", gpuLabels, nil),
		lastErr:     prometheus.NewDesc(NameGPULastError, "Unix time of the most recent failed NVML call on the GPU, labelled with the call and NVML error.", append(append([]string{}, gpuLabels...), "call", "error"), nil),
		xidTotal:    prometheus.NewDesc(NameGPUXIDErrors, "XID critical errors reported by the NVML event set since the exporter started, by XID.", append(append([]string{}, gpuLabels...), "xid"), nil),
		xidLast:     prometheus.NewDesc(NameXIDErrors, "Value of the last XID error encountered.", dcgmLabels, nil),
		driver:      prometheus.NewDesc(NameDriverInfo, "The node's NVIDIA driver, CUDA driver and NVML versions (value 1).", []string{"Hostname", "DCGM_FI_DRIVER_VERSION", "cuda_driver_version", "nvml_version"}, nil),
		duration:    prometheus.NewDesc(NameCollectionDuration, "How long the last NVML collection took.", nil, nil),
		collections: prometheus.NewDesc(NameCollections, "NVML collections since the exporter started.", nil, nil),
		lastRun:     prometheus.NewDesc(NameLastCollection, "Unix time of the last NVML collection.", nil, nil),
		nvmlErr:     prometheus.NewDesc(NameNVMLErrors, "Failed NVML calls by function and NVML error (ERROR_NOT_SUPPORTED is not counted).", []string{"call", "error"}, nil),
	}
	for _, s := range catalog {
		c.field[s.field] = prometheus.NewDesc(s.name, s.help, dcgmLabels, nil)
	}
	return c
}

func (c *gpuCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.field {
		if d != nil {
			ch <- d
		}
	}
	for _, d := range []*prometheus.Desc{c.up, c.lastErr, c.xidTotal, c.xidLast, c.driver, c.duration, c.collections, c.lastRun, c.nvmlErr} {
		ch <- d
	}
}

func (c *gpuCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.snap
	if s == nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.driver, prometheus.GaugeValue, 1, s.Hostname, s.Driver.Version, s.Driver.CUDAVersion, s.Driver.NVMLVersion)
	ch <- prometheus.MustNewConstMetric(c.duration, prometheus.GaugeValue, s.Duration.Seconds())
	ch <- prometheus.MustNewConstMetric(c.collections, prometheus.CounterValue, float64(s.Collections))
	ch <- prometheus.MustNewConstMetric(c.lastRun, prometheus.GaugeValue, float64(s.Time.UnixNano())/1e9)
	for _, e := range s.CallErrors {
		ch <- prometheus.MustNewConstMetric(c.nvmlErr, prometheus.CounterValue, float64(e.Count), e.Call, e.Error)
	}
	for i := range s.GPUs {
		c.collectGPU(ch, s, &s.GPUs[i])
	}
}

func (c *gpuCollector) collectGPU(ch chan<- prometheus.Metric, s *collector.Snapshot, g *collector.GPU) {
	id := []string{strconv.Itoa(g.Index), g.UUID, g.PCIBusID, g.Device, g.Model, s.Hostname, s.Driver.Version}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, b2f(g.Up), id...)
	if e := g.LastError; e != nil {
		ch <- prometheus.MustNewConstMetric(c.lastErr, prometheus.GaugeValue, float64(e.Time.UnixNano())/1e9, append(id, e.Call, e.Error)...)
	}
	for _, x := range g.XIDs {
		ch <- prometheus.MustNewConstMetric(c.xidTotal, prometheus.CounterValue, float64(x.Count), append(id, strconv.FormatUint(x.XID, 10))...)
	}
	if !g.Up {
		return // a lost GPU shows up=0 and its last error, not stale telemetry
	}
	pods := c.podsOf(g.UUID, strconv.Itoa(g.Index))
	c.emit(ch, id, "", "", pods, &g.Values)
	emitPods(ch, c.xidLast, float64(g.LastXID), prometheus.GaugeValue, id, "", "", pods)
	for k := range g.MIG {
		m := &g.MIG[k]
		c.emit(ch, id, m.Profile, strconv.Itoa(m.GIID), c.podsOf(m.UUID, podresources.MIGKey(g.Index, m.GIID)), &m.Values)
	}
}

// podsOf returns the containers holding a device by its UUID or by its other key: a GPU's index
// (index-based device ids, DRA's gpu-<index>), a MIG device's podresources.MIGKey (DRA).
func (c *gpuCollector) podsOf(uuid, index string) []podresources.PodRef {
	refs := c.pods.Lookup(uuid)
	if index != "" {
		if more := c.pods.Lookup(index); len(more) > 0 {
			refs = append(append([]podresources.PodRef{}, refs...), more...)
		}
	}
	return refs
}

// emit sends every available field of one GPU or MIG device, once per holding container.
func (c *gpuCollector) emit(ch chan<- prometheus.Metric, id []string, profile, giID string, pods []podresources.PodRef, v *collector.Values) {
	for _, s := range catalog {
		if val := v[s.field]; !math.IsNaN(val) {
			emitPods(ch, c.field[s.field], val, s.kind, id, profile, giID, pods)
		}
	}
}

func emitPods(ch chan<- prometheus.Metric, d *prometheus.Desc, val float64, kind prometheus.ValueType, id []string, profile, giID string, pods []podresources.PodRef) {
	labels := make([]string, 0, len(dcgmLabels))
	labels = append(append(labels, id...), profile, giID)
	if len(pods) == 0 {
		ch <- prometheus.MustNewConstMetric(d, kind, val, append(labels, "", "", "")...)
		return
	}
	for _, p := range pods {
		ch <- prometheus.MustNewConstMetric(d, kind, val, append(labels, p.Container, p.Namespace, p.Pod)...)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
