package metrics

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/gpupolicy/gpupolicy/plugin/exporter/collector"
	"github.com/gpupolicy/gpupolicy/plugin/exporter/podresources"
)

// Gatherer renders the whole exposition once per change of its inputs (a new NVML snapshot, a
// new pod mapping, a pod-resources refresh) into plain and gzip bytes. A scrape writes those
// bytes: no NVML, no gRPC, no encoding on the scrape path. Go/process metrics are as fresh as
// the last change (at most --interval old).
type Gatherer struct {
	src      Sources
	podStats func() podresources.Stats
	self     *prometheus.Registry // process, Go runtime, pod-resources stats
	builder  *gpuCollector        // used under renderMu

	renderMu   sync.Mutex
	gpuKey     cacheKey // inputs of gpuText (seq, gen), under renderMu
	gpuText    []byte
	pub        atomic.Pointer[published]
	background atomic.Bool // Run is rendering; scrapes never do
}

// published is the exposition for one set of inputs.
type published struct {
	key cacheKey
	exp *exposition
}

type cacheKey struct {
	seq, gen, podRequests uint64
}

// exposition is one rendered scrape, never modified after it is published.
type exposition struct {
	plain, gz []byte
}

// contentType is the Prometheus text format (0.0.4), which every Prometheus version reads.
var contentType = string(expfmt.NewFormat(expfmt.TypeTextPlain))

// NewGatherer builds the gatherer; podStats may be nil when pod attribution is off.
func NewGatherer(src Sources, podStats func() podresources.Stats) *Gatherer {
	self := prometheus.NewRegistry()
	self.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector())
	if podStats != nil {
		self.MustRegister(&podStatsCollector{
			stats:    podStats,
			requests: prometheus.NewDesc(NamePodRequests, "Background List calls to the kubelet pod-resources API, by result (scrapes make none).", []string{"result"}, nil),
			last:     prometheus.NewDesc(NamePodLastSuccess, "Unix time of the last successful pod-resources List.", nil, nil),
		})
	}
	return &Gatherer{src: src, podStats: podStats, self: self, builder: newGPUCollector()}
}

func (g *Gatherer) currentKey() (cacheKey, inputs) {
	in := inputs{snap: g.src.Snapshot()}
	var k cacheKey
	if in.snap != nil {
		k.seq = in.snap.Seq
	}
	if g.src.Pods != nil {
		in.pods = g.src.Pods()
		k.gen = in.pods.Gen
	}
	if g.podStats != nil {
		k.podRequests = g.podStats().Requests
	}
	return k, in
}

// current returns the exposition for the scrape. With Run active it is the last one rendered
// (at most one Run period behind its inputs), so a scrape never renders; without Run (tests) a
// scrape after a change renders it.
func (g *Gatherer) current() (*exposition, error) {
	key, in := g.currentKey()
	if p := g.pub.Load(); p != nil && (p.key == key || g.background.Load()) {
		return p.exp, nil
	}
	return g.render(key, in)
}

func (g *Gatherer) render(key cacheKey, in inputs) (*exposition, error) {
	g.renderMu.Lock()
	defer g.renderMu.Unlock()
	if p := g.pub.Load(); p != nil && p.key == key {
		return p.exp, nil
	}
	// The GPU part only changes with the snapshot or the mapping; the pod-resources counters
	// change every refresh, so the (larger) GPU text is kept and only the self part re-encoded.
	if g.gpuText == nil || g.gpuKey.seq != key.seq || g.gpuKey.gen != key.gen {
		fams, err := g.gatherGPU(in)
		if err != nil {
			return nil, err
		}
		if g.gpuText, err = encodeText(fams); err != nil {
			return nil, err
		}
		g.gpuKey = key
	}
	self, err := g.self.Gather()
	if err != nil {
		return nil, err
	}
	selfText, err := encodeText(self)
	if err != nil {
		return nil, err
	}
	exp, err := newExposition(append(slices.Clip(g.gpuText), selfText...))
	if err != nil {
		return nil, err
	}
	g.pub.Store(&published{key: key, exp: exp})
	return exp, nil
}

// Gather implements prometheus.Gatherer (fresh, uncached), for tests and embedding.
func (g *Gatherer) Gather() ([]*dto.MetricFamily, error) {
	_, in := g.currentKey()
	g.renderMu.Lock()
	defer g.renderMu.Unlock()
	return g.gather(in)
}

type inputs struct {
	snap *collector.Snapshot
	pods *podresources.Mapping
}

func (g *Gatherer) gather(in inputs) ([]*dto.MetricFamily, error) {
	gpu, err := g.gatherGPU(in)
	if err != nil {
		return nil, err
	}
	self, err := g.self.Gather()
	if err != nil {
		return nil, err
	}
	out := append(gpu, self...) // disjoint names
	slices.SortFunc(out, func(a, b *dto.MetricFamily) int { return cmp.Compare(a.GetName(), b.GetName()) })
	return out, nil
}

func (g *Gatherer) gatherGPU(in inputs) ([]*dto.MetricFamily, error) {
	reg := prometheus.NewRegistry()
	g.builder.snap, g.builder.pods = in.snap, in.pods
	defer func() { g.builder.snap, g.builder.pods = nil, nil }()
	reg.MustRegister(g.builder)
	return reg.Gather()
}

// encodeText writes families in the text format; families stay contiguous, which is all the
// format asks, so the GPU and self parts can be concatenated.
func encodeText(fams []*dto.MetricFamily) ([]byte, error) {
	var b bytes.Buffer
	enc := expfmt.NewEncoder(&b, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range fams {
		if err := enc.Encode(f); err != nil {
			return nil, err
		}
	}
	return b.Bytes(), nil
}

func newExposition(plain []byte) (*exposition, error) {
	var gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gz, gzip.BestSpeed)
	if _, err := zw.Write(plain); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return &exposition{plain: plain, gz: gz.Bytes()}, nil
}

// Run renders soon after a new snapshot or pod mapping is published, so that scrapes find the
// bytes ready. Without Run the first scrape after a change renders them.
func (g *Gatherer) Run(ctx context.Context, every time.Duration, log *slog.Logger) {
	g.background.Store(true)
	defer g.background.Store(false)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if key, in := g.currentKey(); g.pub.Load() == nil || g.pub.Load().key != key {
				if _, err := g.render(key, in); err != nil {
					log.Error("rendering metrics failed; scrapes serve the previous exposition", "stage", "metrics", "error", err)
				}
			}
		}
	}
}

// Handler serves /metrics.
func (g *Gatherer) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		exp, err := g.current()
		if err != nil {
			http.Error(w, "gathering metrics: "+err.Error(), http.StatusInternalServerError)
			return
		}
		h := w.Header()
		h.Set("Content-Type", contentType)
		h.Add("Vary", "Accept-Encoding")
		body := exp.plain
		if acceptsGzip(r) {
			h.Set("Content-Encoding", "gzip")
			body = exp.gz
		}
		_, _ = w.Write(body)
	})
}

func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		if enc, _, _ := strings.Cut(strings.TrimSpace(part), ";"); enc == "gzip" {
			return true
		}
	}
	return false
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
