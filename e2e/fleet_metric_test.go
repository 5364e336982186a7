package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// checkHeldBackAlert evaluates the rendered PrometheusRule with Prometheus' promtool over the
// series kube-state-metrics exports for the fleet's GPUStackReady conditions as the agents
// wrote them (kube_node_status_condition{node, condition, status="true|false|unknown"}, 1 for
// the condition's status, 0 for the others): GPUStackHeldBack fires for exactly the held-back
// nodes. (kube-state-metrics itself is not served by the module proxy here, so its export is
// written from the API's conditions; promtool is the real evaluator.)
func (fe *fleetEnv) checkHeldBackAlert(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("promtool not installed (Debian package prometheus)")
		}
		t.Log("promtool not installed: GPUStackHeldBack not evaluated")
		return
	}
	var rules map[string]any
	for _, o := range objs {
		if o.GetKind() == "PrometheusRule" {
			rules, _, _ = unstructured.NestedMap(o.Object, "spec")
		}
	}
	if rules == nil {
		t.Fatal("the rendered fleet has no PrometheusRule")
	}
	var series, alerts []string
	for _, n := range fe.nodes {
		node, err := fe.cs.CoreV1().Nodes().Get(context.Background(), n.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		status := ""
		for _, c := range node.Status.Conditions {
			if c.Type == config.ConditionGPUStackReady {
				status = strings.ToLower(string(c.Status))
			}
		}
		if status == "" {
			continue // the CPU node: no agent, no condition
		}
		for _, s := range []corev1.ConditionStatus{corev1.ConditionTrue, corev1.ConditionFalse, corev1.ConditionUnknown} {
			v := "0x30"
			if strings.ToLower(string(s)) == status {
				v = "1x30"
			}
			series = append(series, fmt.Sprintf("  - series: 'kube_node_status_condition{node=%q, condition=%q, status=%q}'\n    values: '%s'", n.name, config.ConditionGPUStackReady, strings.ToLower(string(s)), v))
		}
		if status == "false" {
			alerts = append(alerts, fmt.Sprintf("    - exp_labels: {severity: warning, node: %s, condition: %s, status: \"false\"}\n      exp_annotations: {summary: \"%s: the GPU stack is held back; kubectl describe node %s (condition GPUStackReady) says why\"}", n.name, config.ConditionGPUStackReady, n.name, n.name))
		}
	}
	sort.Strings(alerts)
	if want := fe.heldBackCount(); len(alerts) != want {
		t.Fatalf("%d nodes have GPUStackReady=False, want the %d held back", len(alerts), want)
	}
	dir := t.TempDir()
	b, err := yaml.Marshal(rules)
	if err != nil {
		t.Fatal(err)
	}
	tests := "rule_files: [rules.yaml]\nevaluation_interval: 1m\ntests:\n- interval: 1m\n  input_series:\n" + strings.Join(series, "\n") +
		"\n  alert_rule_test:\n  - eval_time: 20m\n    alertname: GPUStackHeldBack\n    exp_alerts:\n" + strings.Join(alerts, "\n") + "\n"
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tests.yaml"), []byte(tests), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(promtool, "test", "rules", "tests.yaml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules (GPUStackHeldBack for the held-back nodes): %v\n%s", err, out)
	}
	t.Logf("   GPUStackHeldBack fires for the %d held-back nodes and no other (promtool)", len(alerts))
}

func (fe *fleetEnv) heldBackCount() int {
	n := 0
	for _, x := range fe.nodes {
		if x.heldBack() {
			n++
		}
	}
	return n
}
