package metrics_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"sigs.k8s.io/yaml"

	"github.com/gpupolicy/gpupolicy/fn/pipeline"
	"github.com/gpupolicy/gpupolicy/fn/validate"
	"github.com/gpupolicy/gpupolicy/plugin/exporter/metrics"
)

// TestXIDAlertOnRealScrape feeds the rendered GPUXidError alert what this exporter really
// emits: a scrape of the dgxa100 mock before any XID, then one after XID 79 (hardware) and 13
// (application, ignored by the default policy) reached GPU 2 through NVML's event set. The
// exporter creates an XID's series when it first happens, at 1, so the alert must fire on the
// series' appearance (increase() alone never sees a first sample), once, and not for XID 13.
func TestXIDAlertOnRealScrape(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not installed (apt-get install prometheus); CI installs it")
	}
	r := newRig(t, "dgxa100", "")
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { r.col.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()
	waitFor(t, "the first collection", func() bool { return r.col.Snapshot() != nil })
	before := r.scrape(t)
	if n := len(before[metrics.NameGPUXIDErrors].GetMetric()); n != 0 {
		t.Fatalf("before any XID the exporter emits %d XID series", n)
	}
	waitFor(t, "the XID event set", func() bool {
		n, err := r.mock.InjectXID(2, 79)
		if err != nil {
			t.Fatal(err)
		}
		return n > 0
	})
	if _, err := r.mock.InjectXID(2, 13); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "both XIDs in the snapshot", func() bool { return len(r.col.Snapshot().GPUs[2].XIDs) == 2 })
	after := r.scrape(t)

	// 15 minutes of the first scrape, then 25 of the second, one sample a minute.
	var in strings.Builder
	var fired map[string]string
	for _, name := range []string{metrics.NameGPUXIDErrors, metrics.NameGPUUp} {
		b, a := samples(before[name]), samples(after[name])
		for _, key := range slices.Sorted(maps.Keys(a)) {
			first := "_x14"
			if v, ok := b[key]; ok {
				first = fmt.Sprintf("%gx14", v)
			}
			fmt.Fprintf(&in, "  - series: '%s%s'\n    values: '%s %gx24'\n", name, key, first, a[key])
		}
		for _, m := range after[name].GetMetric() {
			if l := labels(m); name == metrics.NameGPUXIDErrors && l["xid"] == "79" {
				fired = l
			}
		}
	}
	if fired == nil || fired["gpu"] != "2" {
		t.Fatalf("no XID 79 series on GPU 2 in the scrape: %v", after[metrics.NameGPUXIDErrors])
	}
	fired["severity"] = "warning"
	expLabels, err := yaml.Marshal(fired)
	if err != nil {
		t.Fatal(err)
	}
	tests := fmt.Sprintf(`rule_files: [rules.yaml]
evaluation_interval: 1m
tests:
- interval: 1m
  input_series:
%s  alert_rule_test:
  - eval_time: 10m
    alertname: GPUXidError
    exp_alerts: []
  - eval_time: 16m
    alertname: GPUXidError
    exp_alerts:
    - exp_labels:
%s      exp_annotations: {summary: "GPU 2 on node-a reported XID 79"}
  - eval_time: 30m
    alertname: GPUXidError
    exp_alerts: []
`, in.String(), indent(string(expLabels), "        "))

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), renderedRules(t), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tests.yaml"), []byte(tests), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(promtool, "test", "rules", "tests.yaml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s\ntests.yaml:\n%s", err, out, tests)
	}
}

// samples maps each series of a family, as its PromQL label set, to its value.
func samples(f *dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	for _, m := range f.GetMetric() {
		l := labels(m)
		parts := make([]string, 0, len(l))
		for _, k := range slices.Sorted(maps.Keys(l)) {
			parts = append(parts, fmt.Sprintf("%s=%q", k, l[k]))
		}
		out["{"+strings.Join(parts, ", ")+"}"] = value(m)
	}
	return out
}

// renderedRules is the PrometheusRule's spec the function renders for its default test policy.
func renderedRules(t *testing.T) []byte {
	t.Helper()
	data, err := os.ReadFile("../../../fn/render/testdata/default/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, objs, res := pipeline.Load(data, validate.Options{})
	if res.HasErrors() {
		t.Fatal(res.Text("policy.yaml"))
	}
	us, err := objs.Unstructured()
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range us {
		if u.GetKind() == "PrometheusRule" {
			b, err := yaml.Marshal(u.Object["spec"])
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
	t.Fatal("the default policy renders no PrometheusRule")
	return nil
}

func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	return prefix + strings.Join(lines, "\n"+prefix) + "\n"
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen within 30s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
