package metrics

import (
	"cmp"
	"net/http"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/gpupolicy/gpupolicy/plugin/exporter/podresources"
)

// Gatherer serves the GPU families cached per (snapshot, mapping) and the live self metrics.
type Gatherer struct {
	src  Sources
	live *prometheus.Registry

	mu      sync.Mutex
	key     cacheKey
	cached  []*dto.MetricFamily
	builder *gpuCollector
}

type cacheKey struct {
	seq, gen uint64
	valid    bool
}

// NewGatherer builds the gatherer; podStats may be nil when pod attribution is off.
func NewGatherer(src Sources, podStats func() podresources.Stats) *Gatherer {
	live := prometheus.NewRegistry()
	live.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector())
	if podStats != nil {
		live.MustRegister(&podStatsCollector{
			stats:    podStats,
			requests: prometheus.NewDesc(NamePodRequests, "Background List calls to the kubelet pod-resources API, by result (scrapes make none).", []string{"result"}, nil),
			last:     prometheus.NewDesc(NamePodLastSuccess, "Unix time of the last successful pod-resources List.", nil, nil),
		})
	}
	return &Gatherer{src: src, live: live, builder: newGPUCollector()}
}

// Gather implements prometheus.Gatherer.
func (g *Gatherer) Gather() ([]*dto.MetricFamily, error) {
	gpu, err := g.gpuFamilies()
	if err != nil {
		return nil, err
	}
	live, err := g.live.Gather()
	if err != nil {
		return nil, err
	}
	// The two sets of names are disjoint; merge sorted as the registry would.
	out := make([]*dto.MetricFamily, 0, len(gpu)+len(live))
	out = append(append(out, gpu...), live...)
	slices.SortFunc(out, func(a, b *dto.MetricFamily) int { return cmp.Compare(a.GetName(), b.GetName()) })
	return out, nil
}

func (g *Gatherer) gpuFamilies() ([]*dto.MetricFamily, error) {
	snap := g.src.Snapshot()
	var pods *podresources.Mapping
	if g.src.Pods != nil {
		pods = g.src.Pods()
	}
	key := cacheKey{valid: true}
	if snap != nil {
		key.seq = snap.Seq
	}
	if pods != nil {
		key.gen = pods.Gen
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if key == g.key {
		return g.cached, nil // families are never modified after Gather, so sharing them is safe
	}
	reg := prometheus.NewPedanticRegistry()
	g.builder.snap, g.builder.pods = snap, pods
	reg.MustRegister(g.builder)
	fams, err := reg.Gather()
	g.builder.snap, g.builder.pods = nil, nil
	if err != nil {
		return nil, err
	}
	g.key, g.cached = key, fams
	return fams, nil
}

// Handler serves /metrics from the gatherer.
func (g *Gatherer) Handler() http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

type podStatsCollector struct {
	stats          func() podresources.Stats
	requests, last *prometheus.Desc
}

func (c *podStatsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.requests; ch <- c.last }

func (c *podStatsCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(s.Successes), "success")
	ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(s.Errors), "error")
	if !s.LastSuccess.IsZero() {
		ch <- prometheus.MustNewConstMetric(c.last, prometheus.GaugeValue, float64(s.LastSuccess.UnixNano())/1e9)
	}
}
