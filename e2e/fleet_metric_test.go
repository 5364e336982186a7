package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/gpupolicy/gpupolicy/e2e/internal/observers"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// checkAlerts evaluates the rendered PrometheusRule with Prometheus' promtool over what the
// real kube-state-metrics exports for the fleet: the GPUStackReady conditions the agents wrote
// (kube_node_status_condition) and the stage DaemonSets' status
// (kube_daemonset_status_number_unavailable), scraped from its /metrics once they agree with
// the API server. GPUStackHeldBack must fire for exactly the held-back nodes and
// GPUStageUnavailable for exactly the DaemonSets of the policy's namespace the API server
// reports with unavailable pods; each is quiet everywhere else. want is the situation the test
// set up, which the API server's state must match first.
func (fe *fleetEnv) checkAlerts(t *testing.T, objs []*unstructured.Unstructured, want alertCase) {
	t.Helper()
	ctx := context.Background()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("promtool not installed (Debian package prometheus)")
		}
		t.Log("promtool not installed: the alerts are not evaluated")
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
	ksm, err := observers.StartKubeStateMetrics(ctx, observerPeers(t), fe.dir, fe.c.Kubeconfig, "nodes,daemonsets")
	if err != nil {
		t.Fatal(err)
	}
	defer ksm.Stop()

	// The API server's view, which the alerts must follow, and kube-state-metrics' export of it.
	var samples []observers.Sample
	var heldBack, unavailable []string
	eventually(t, time.Minute, "kube-state-metrics exporting the fleet's conditions and DaemonSets as the API server has them", func() (bool, string) {
		heldBack, unavailable = fe.apiAlertState(t)
		samples, err = ksm.Scrape(ctx, "kube_node_status_condition", "kube_daemonset_status_number_unavailable")
		if err != nil {
			return false, err.Error()
		}
		var gotHeld, gotUnavailable []string
		for _, s := range samples {
			switch {
			case s.Name == "kube_node_status_condition" && s.Labels["condition"] == config.ConditionGPUStackReady && s.Labels["status"] == "false" && s.Value == 1:
				gotHeld = append(gotHeld, s.Labels["node"])
			case s.Name == "kube_daemonset_status_number_unavailable" && s.Labels["namespace"] == fe.ns && s.Value > 0:
				gotUnavailable = append(gotUnavailable, s.Labels["daemonset"])
			}
		}
		sort.Strings(gotHeld)
		sort.Strings(gotUnavailable)
		return slices.Equal(gotHeld, heldBack) && slices.Equal(gotUnavailable, unavailable),
			fmt.Sprintf("held back: API %v, exported %v; unavailable: API %v, exported %v", heldBack, gotHeld, unavailable, gotUnavailable)
	})
	if want.heldBack >= 0 && len(heldBack) != want.heldBack {
		t.Fatalf("%d nodes have GPUStackReady=False (%v), want the %d held back", len(heldBack), heldBack, want.heldBack)
	}
	if !slices.Equal(unavailable, want.unavailable) {
		t.Fatalf("DaemonSets with unavailable pods: %v, want %v", unavailable, want.unavailable)
	}

	series := make([]string, 0, len(samples))
	for _, s := range samples {
		series = append(series, fmt.Sprintf("  - series: '%s'\n    values: '%gx50'", s.Series, s.Value))
	}
	var held, stages []string
	for _, n := range heldBack {
		held = append(held, fmt.Sprintf("    - exp_labels: {severity: warning, node: %s, condition: %s, status: \"false\"}\n      exp_annotations: {summary: \"%s: the GPU stack is held back; kubectl describe node %s (condition GPUStackReady) says why\"}", n, config.ConditionGPUStackReady, n, n))
	}
	for _, s := range samples {
		if s.Name == "kube_daemonset_status_number_unavailable" && s.Labels["namespace"] == fe.ns && s.Value > 0 {
			ds := s.Labels["daemonset"]
			stages = append(stages, fmt.Sprintf("    - exp_labels: {severity: warning, namespace: %s, daemonset: %s}\n      exp_annotations: {summary: \"DaemonSet %s/%s has had %g nodes without a ready pod for 30 minutes; kubectl -n %s describe daemonset %s\"}", fe.ns, ds, fe.ns, ds, s.Value, fe.ns, ds))
		}
	}
	test := func(alert string, exp []string) string {
		t := "  - eval_time: 40m\n    alertname: " + alert + "\n    exp_alerts:"
		if len(exp) == 0 {
			return t + " []\n"
		}
		return t + "\n" + strings.Join(exp, "\n") + "\n"
	}
	tests := "rule_files: [rules.yaml]\nevaluation_interval: 1m\ntests:\n- interval: 1m\n  input_series:\n" + strings.Join(series, "\n") +
		"\n  alert_rule_test:\n" + test("GPUStackHeldBack", held) + test("GPUStageUnavailable", stages)
	dir := t.TempDir()
	b, err := yaml.Marshal(rules)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rules.yaml"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "tests.yaml"), []byte(tests), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(promtool, "test", "rules", "tests.yaml")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules over kube-state-metrics' series: %v\n%s\n%s", err, out, tests)
	}
	t.Logf("   on kube-state-metrics' %d series: GPUStackHeldBack fires for the %d held-back nodes, GPUStageUnavailable for %v, no other (promtool)",
		len(samples), len(held), unavailable)
}

// alertCase is the situation an alert check expects: how many nodes are held back (-1: not
// asserted) and which stage DaemonSets have unavailable pods.
type alertCase struct {
	heldBack    int
	unavailable []string
}

// apiAlertState is what the alerts must say, read from the API server: the nodes whose
// GPUStackReady is False, and the DaemonSets of the policy's namespace with unavailable pods.
func (fe *fleetEnv) apiAlertState(t *testing.T) (heldBack, unavailable []string) {
	t.Helper()
	ctx := context.Background()
	nodes, err := fe.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		for _, c := range n.Status.Conditions {
			if c.Type == config.ConditionGPUStackReady && c.Status == corev1.ConditionFalse {
				heldBack = append(heldBack, n.Name)
			}
		}
	}
	dss, err := fe.cs.AppsV1().DaemonSets(fe.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, ds := range dss.Items {
		if ds.Status.NumberUnavailable > 0 {
			unavailable = append(unavailable, ds.Name)
		}
	}
	sort.Strings(heldBack)
	sort.Strings(unavailable)
	return heldBack, unavailable
}

// ensureObservers builds (once per run; cached across runs) NFD's nfd-master and
// kube-state-metrics.
var ensureObservers = sync.OnceValues(func() (*observers.Peer, error) {
	return observers.Ensure(filepath.Join(env.repoRoot, "e2e", "hack", "build-nfd-ksm.sh"))
})

func observerPeers(t *testing.T) *observers.Peer {
	t.Helper()
	p, err := ensureObservers()
	if err != nil {
		t.Fatal(err)
	}
	return p
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
