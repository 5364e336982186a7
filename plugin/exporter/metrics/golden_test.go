package metrics_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpupolicy/gpupolicy/plugin/exporter/metrics"
	"github.com/gpupolicy/gpupolicy/plugin/exporter/podresources/podresourcestest"
)

var update = flag.Bool("update", false, "rewrite testdata golden files")

// TestFamiliesGolden pins every family the exporter emits (name, type, help, label names) on a
// Hopper mock where everything is present: MIG, GPM, pods, an XID, a lost GPU. A rename shows
// up in review as a diff of testdata/families.golden.
func TestFamiliesGolden(t *testing.T) {
	srv := podresourcestest.Start(t)
	r := newRig(t, "dgxh100", srv.Socket)
	if err := r.mock.ConfigureMIG(1, nvml.GPU_INSTANCE_PROFILE_1_SLICE); err != nil {
		t.Fatal(err)
	}
	srv.SetPods(podresourcestest.Pod{Namespace: "ns", Name: "p", Containers: []podresourcestest.Container{
		{Name: "c", Resource: "nvidia.com/gpu", DeviceIDs: []string{uuidOf(t, r.mock, 0)}}}})
	r.refresh()
	injectXID(t, r, 0, 13)
	if err := r.mock.SetLost(7, true); err != nil {
		t.Fatal(err)
	}
	r.refresh()
	r.refresh() // GPM needs two samples
	fams := r.scrape(t)
	var lines []string
	for name, f := range fams {
		if strings.HasPrefix(name, "go_") || strings.HasPrefix(name, "process_") {
			continue
		}
		var labelNames []string
		for _, l := range f.GetMetric()[0].GetLabel() {
			labelNames = append(labelNames, l.GetName())
		}
		lines = append(lines, fmt.Sprintf("%s %s {%s}\n  %s", name, strings.ToLower(f.GetType().String()), strings.Join(labelNames, ","), f.GetHelp()))
	}
	slices.Sort(lines)
	got := strings.Join(lines, "\n") + "\n"
	path := filepath.Join("testdata", "families.golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update once)", err)
	}
	if got != string(want) {
		t.Errorf("families differ from %s (go test -update to accept):\n%s", path, got)
	}
	var emitted []string
	for name := range fams {
		if !strings.HasPrefix(name, "go_") && !strings.HasPrefix(name, "process_") {
			emitted = append(emitted, name)
		}
	}
	slices.Sort(emitted)
	if !slices.Equal(emitted, metrics.Names()) {
		t.Errorf("emitted families %v\ndiffer from metrics.Names() %v", emitted, metrics.Names())
	}
}

// injectXID runs the collector's event watcher and delivers an XID once it listens.
func injectXID(t *testing.T, r *rig, gpu int, xid uint64) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { r.col.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	// Ready (the exporter's /readyz) means the XID events are registered.
	select {
	case <-r.col.Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("collector not ready within 30s")
	}
	deadline := time.Now().Add(30 * time.Second)
	if n, err := r.mock.InjectXID(gpu, xid); err != nil || n != 1 {
		t.Fatalf("XID injected once the collector was ready reached %d event sets (%v), want the collector's one", n, err)
	}
	for r.col.Snapshot().GPUs[gpu].LastXID != xid {
		if time.Now().After(deadline) {
			t.Fatalf("XID %d on GPU %d not in the snapshot within 30s", xid, gpu)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestGrafanaDashboardUsesOnlyEmittedMetrics keeps examples/grafana in step with the exporter.
func TestGrafanaDashboardUsesOnlyEmittedMetrics(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "examples", "grafana", "gpu-exporter.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{"process_resident_memory_bytes": true}
	for _, n := range metrics.Names() {
		known[n] = true
	}
	ident := regexp.MustCompile(`\b(DCGM_FI_[A-Z0-9_]+|gpupolicy_[a-z0-9_]+|process_[a-z_]+)\b`)
	exprs := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			exprs++
			for _, name := range ident.FindAllString(tg.Expr, -1) {
				if name == "DCGM_FI_DRIVER_VERSION" { // a label
					continue
				}
				if !known[name] {
					t.Errorf("panel %q uses %s, which the exporter does not emit", p.Title, name)
				}
			}
		}
	}
	if exprs < 20 {
		t.Errorf("dashboard has only %d queries", exprs)
	}
}
