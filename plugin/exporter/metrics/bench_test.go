package metrics_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpupolicy/gpupolicy/plugin/exporter/podresources/podresourcestest"
)

// benchRig is the benchmark node of issue 6: 8 GPUs x 7 MIG devices (1g.5gb), 200 pods
// time-sliced over the 56 MIG devices, attribution from a real pod-resources server.
func benchRig(b *testing.B) (*rig, *podresourcestest.Server) {
	srv := podresourcestest.Start(b)
	r := newRig(b, "dgxa100", srv.Socket)
	var migs []string
	for g := range 8 {
		profiles := make([]int, 7)
		for i := range profiles {
			profiles[i] = nvml.GPU_INSTANCE_PROFILE_1_SLICE
		}
		if err := r.mock.ConfigureMIG(g, profiles...); err != nil {
			b.Fatal(err)
		}
		migs = append(migs, migUUIDs(b, r.mock, g)...)
	}
	if len(migs) != 56 {
		b.Fatalf("%d MIG devices, want 56", len(migs))
	}
	var pods []podresourcestest.Pod
	for p := range 200 {
		id := fmt.Sprintf("%s::%d", migs[p%len(migs)], p/len(migs))
		pods = append(pods, podresourcestest.Pod{Namespace: fmt.Sprintf("team-%d", p%10), Name: fmt.Sprintf("job-%03d", p),
			Containers: []podresourcestest.Container{{Name: "main", Resource: "nvidia.com/mig-1g.5gb", DeviceIDs: []string{id}}}})
	}
	srv.SetPods(pods...)
	r.refresh()
	if r.pods.Mapping().Len() != 56 {
		b.Fatalf("mapping has %d devices, want 56", r.pods.Mapping().Len())
	}
	return r, srv
}

// prometheusAccept is what Prometheus 2.x sends.
const prometheusAccept = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"

func benchScrape(b *testing.B, gzip bool) {
	r, srv := benchRig(b)
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Accept", prometheusAccept)
	if gzip {
		req.Header.Set("Accept-Encoding", "gzip")
	}
	r.scrapeText(b) // warm the cache, as the background builder does after each snapshot
	callsBefore := srv.Calls()
	var durations []time.Duration
	var size int
	b.ReportAllocs()
	w := &countingWriter{header: http.Header{}}
	for b.Loop() {
		w.n = 0
		start := time.Now()
		r.handler.ServeHTTP(w, req)
		durations = append(durations, time.Since(start))
		size = w.n
	}
	reportLatency(b, durations)
	b.ReportMetric(float64(size), "bytes/scrape")
	b.ReportMetric(float64(srv.Calls()-callsBefore)/float64(len(durations)), "podres-calls/scrape")
}

// countingWriter stands in for the connection: it counts the bytes a scrape writes.
type countingWriter struct {
	header http.Header
	n      int
}

func (w *countingWriter) Header() http.Header         { return w.header }
func (w *countingWriter) WriteHeader(int)             {}
func (w *countingWriter) Write(p []byte) (int, error) { w.n += len(p); return len(p), nil }

// BenchmarkScrape: one scrape of the benchmark node, plain text.
func BenchmarkScrape(b *testing.B) { benchScrape(b, false) }

// BenchmarkScrapeGzip: the same with gzip, as Prometheus asks for it.
func BenchmarkScrapeGzip(b *testing.B) { benchScrape(b, true) }

func reportLatency(b *testing.B, durations []time.Duration) {
	slices.Sort(durations)
	pct := func(p float64) float64 {
		return float64(durations[int(p*float64(len(durations)-1))].Nanoseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50-us")
	b.ReportMetric(pct(0.99), "p99-us")
}

// BenchmarkScrapeHTTP: a scrape as Prometheus makes it, over loopback TCP with gzip, through
// Go's HTTP server and client (connection reused).
func BenchmarkScrapeHTTP(b *testing.B) {
	r, srv := benchRig(b)
	ts := httptest.NewServer(r.handler)
	defer ts.Close()
	client := ts.Client()
	get := func() int {
		req, _ := http.NewRequest(http.MethodGet, ts.URL+"/metrics", nil)
		req.Header.Set("Accept", prometheusAccept)
		resp, err := client.Do(req) // the transport asks for gzip and decompresses
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return int(n)
	}
	get()
	callsBefore := srv.Calls()
	var durations []time.Duration
	b.ReportAllocs()
	for b.Loop() {
		start := time.Now()
		get()
		durations = append(durations, time.Since(start))
	}
	reportLatency(b, durations)
	b.ReportMetric(float64(srv.Calls()-callsBefore)/float64(len(durations)), "podres-calls/scrape")
}

// BenchmarkRebuild: a new snapshot arrives and the GPU families are rebuilt (done in the
// background every --interval, off the scrape path).
func BenchmarkRebuild(b *testing.B) {
	r, _ := benchRig(b)
	b.ReportAllocs()
	for b.Loop() {
		r.col.Collect()
		r.scrapeText(b)
	}
}

func TestBenchRigSeriesCount(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	r, _ := benchRig(&testing.B{})
	fams := r.scrape(t)
	n := 0
	for _, f := range fams {
		n += len(f.GetMetric())
	}
	if got := len(series(fams, "DCGM_FI_DEV_FB_USED", map[string]string{"GPU_I_PROFILE": "1g.5gb"})); got != 200 {
		t.Errorf("MIG FB_USED series: %d, want one per pod (200)", got)
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	t.Logf("benchmark node: %d series, %d bytes per scrape; live heap after rendering %.1f MiB (test process)",
		n, len(r.scrapeText(t)), float64(ms.HeapAlloc)/(1<<20))
}
