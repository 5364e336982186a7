package render_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/fn/render"

	"github.com/gpupolicy/gpupolicy/internal/peer"
)

func prometheusRule(t *testing.T, objs render.Objects) map[string]any {
	for _, o := range objs {
		if u, ok := o.Obj.(*unstructured.Unstructured); ok && u.GetKind() == "PrometheusRule" {
			m, err := o.Map()
			if err != nil {
				t.Fatal(err)
			}
			return m["spec"].(map[string]any)
		}
	}
	return nil
}

// TestPrometheusRulesPromtool checks the alert rules of every case with Prometheus' own
// promtool (Debian package prometheus): PromQL parses, templates expand, durations are valid.
func TestPrometheusRulesPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		peer.Missing(t, "promtool not installed (Debian package prometheus)")
	}
	checked := 0
	for _, name := range cases(t) {
		p, objs := load(t, name)
		spec := prometheusRule(t, objs)
		want := v1alpha1.Bool(p.Spec.Exporter.Enabled) && v1alpha1.Bool(p.Spec.Exporter.PrometheusRule)
		if (spec != nil) != want {
			t.Fatalf("%s: PrometheusRule present = %v, want %v", name, spec != nil, want)
		}
		if spec == nil {
			continue
		}
		b, err := yaml.Marshal(spec) // the spec is a rule file: groups: [...]
		if err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(t.TempDir(), "rules.yaml")
		if err := os.WriteFile(file, b, 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(promtool, "check", "rules", file).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: promtool check rules: %v\n%s\n%s", name, err, out, b)
		}
		if !strings.Contains(string(out), "SUCCESS: 9 rules found") {
			t.Errorf("%s: %s", name, out)
		}
		checked++
	}
	if checked == 0 {
		t.Fatal("no case renders a PrometheusRule")
	}
}

// TestDriverDriftExpression: branch enforcement matches the whole branch, exact the version.
func TestDriverDriftExpression(t *testing.T) {
	for _, name := range []string{"default", "none"} {
		p, objs := load(t, name)
		spec := prometheusRule(t, objs)
		if spec == nil {
			p.Spec.Exporter.Enabled, p.Spec.Exporter.ServiceMonitor = ptr(true), ptr(true)
			var err error
			if objs, err = render.Render(p); err != nil {
				t.Fatal(err)
			}
			spec = prometheusRule(t, objs)
		}
		want := `gpupolicy_node_driver_info{DCGM_FI_DRIVER_VERSION!~"580\\..*"} == 1`
		if p.Spec.Driver.Enforce == v1alpha1.EnforceExact {
			want = `gpupolicy_node_driver_info{DCGM_FI_DRIVER_VERSION!="580.95.05"} == 1`
		}
		if got := alertExpr(spec, "GPUDriverDrift"); got != want {
			t.Errorf("%s (enforce %s): drift expression %s, want %s", name, p.Spec.Driver.Enforce, got, want)
		}
	}
}

func alertExpr(spec map[string]any, alert string) string {
	for _, g := range spec["groups"].([]any) {
		for _, r := range g.(map[string]any)["rules"].([]any) {
			if rule := r.(map[string]any); rule["alert"] == alert {
				return rule["expr"].(string)
			}
		}
	}
	return ""
}

func ptr[T any](v T) *T { return &v }

// alertTests are promtool unit tests for the default case's alerts: a node on another branch
// drifts, a node on the same branch does not; a lost GPU fires; an application XID (13) is
// ignored while a hardware XID (79) fires. The XID series are what the exporter emits: absent
// until the XID first happens, then 1 (plugin/exporter/metrics's TestXIDAlertOnRealScrape
// feeds a real scrape); an XID 79 that happened long before (GPU 1) does not fire, nor GPU 0's 10 minutes on.
// A node whose GPUStackReady condition stays False (kube-state-metrics' series) fires
// GPUStackHeldBack after 15 minutes, a ready one does not. A stage DaemonSet of the policy's
// namespace with an unready pod fires GPUStageUnavailable after 30 minutes; one with none, or
// another namespace's, does not.
const alertTests = `rule_files: [rules.yaml]
evaluation_interval: 1m
tests:
- interval: 1m
  input_series:
  - series: 'gpupolicy_node_driver_info{Hostname="a", DCGM_FI_DRIVER_VERSION="580.65.06"}'
    values: '1x30'
  - series: 'gpupolicy_node_driver_info{Hostname="b", DCGM_FI_DRIVER_VERSION="570.172.08"}'
    values: '1x30'
  - series: 'gpupolicy_gpu_up{Hostname="a", gpu="0", UUID="GPU-1"}'
    values: '1 1 0 0 0 0 0'
  - series: 'gpupolicy_gpu_xid_errors_total{Hostname="a", gpu="0", UUID="GPU-1", xid="13"}'
    values: '_ 1 2 3 4 5 6'
  - series: 'gpupolicy_gpu_xid_errors_total{Hostname="a", gpu="0", UUID="GPU-1", xid="79"}'
    values: '_x14 1x25'
  - series: 'gpupolicy_gpu_xid_errors_total{Hostname="a", gpu="1", UUID="GPU-2", xid="79"}'
    values: '1x40'
  - series: 'kube_node_status_condition{node="drifted", condition="GPUStackReady", status="false"}'
    values: '1x30'
  - series: 'kube_node_status_condition{node="ready", condition="GPUStackReady", status="false"}'
    values: '0x30'
  - series: 'kube_daemonset_status_number_unavailable{namespace="gpu-system", daemonset="gpu-exporter"}'
    values: '1x40'
  - series: 'kube_daemonset_status_number_unavailable{namespace="gpu-system", daemonset="gpu-device-plugin"}'
    values: '0x40'
  - series: 'kube_daemonset_status_number_unavailable{namespace="kube-system", daemonset="kube-proxy"}'
    values: '3x40'
  alert_rule_test:
  - eval_time: 20m
    alertname: GPUStageUnavailable
  - eval_time: 35m
    alertname: GPUStageUnavailable
    exp_alerts:
    - exp_labels: {severity: warning, namespace: gpu-system, daemonset: gpu-exporter}
      exp_annotations: {summary: "DaemonSet gpu-system/gpu-exporter has had 1 nodes without a ready pod for 30 minutes; kubectl -n gpu-system describe daemonset gpu-exporter"}
  - eval_time: 10m
    alertname: GPUStackHeldBack
  - eval_time: 20m
    alertname: GPUStackHeldBack
    exp_alerts:
    - exp_labels: {severity: warning, node: drifted, condition: GPUStackReady, status: "false"}
      exp_annotations: {summary: "drifted: the GPU stack is held back; kubectl describe node drifted (condition GPUStackReady) says why"}
  - eval_time: 20m
    alertname: GPUDriverDrift
    exp_alerts:
    - exp_labels: {severity: warning, Hostname: b, DCGM_FI_DRIVER_VERSION: "570.172.08"}
      exp_annotations: {summary: "b runs driver 570.172.08, the policy expects branch R580 (580.95.05)"}
  - eval_time: 5m
    alertname: GPULost
    exp_alerts:
    - exp_labels: {severity: critical, Hostname: a, gpu: "0", UUID: GPU-1}
      exp_annotations: {summary: "GPU 0 (GPU-1) on a does not answer NVML (fell off the bus?)"}
  - eval_time: 20m
    alertname: GPUXidError
    exp_alerts:
    - exp_labels: {severity: warning, Hostname: a, gpu: "0", UUID: GPU-1, xid: "79"}
      exp_annotations: {summary: "GPU 0 on a reported XID 79"}
  - eval_time: 30m
    alertname: GPUXidError
    exp_alerts: []
`

func TestAlertsFire(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		peer.Missing(t, "promtool not installed (Debian package prometheus)")
	}
	_, objs := load(t, "default")
	b, err := yaml.Marshal(prometheusRule(t, objs))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tests.yaml"), []byte(alertTests), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(promtool, "test", "rules", "tests.yaml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}
