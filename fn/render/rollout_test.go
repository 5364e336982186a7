package render_test

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestRolloutAndMonitoringSettings: per component resources and maxUnavailable reach their
// DaemonSet (a pool's own resources its own DaemonSet, the pool without them the spec's), the
// ServiceMonitor carries its selector label next to render's own, and prometheusRule: false
// drops the alerts while the ServiceMonitor stays. The defaults are today's values (the
// default case's golden output is unchanged by these fields).
func TestRolloutAndMonitoringSettings(t *testing.T) {
	_, objs := load(t, "monitoring-rollout")
	us, err := objs.Unstructured()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*unstructured.Unstructured{}
	for _, u := range us {
		byName[u.GetKind()+"/"+u.GetName()] = u
	}
	for _, tc := range []struct {
		ds, maxUnavailable, memoryLimit string
	}{
		{"gpu-exporter", "25%", "512Mi"},
		{"gpu-device-plugin", "1", "256Mi"},
		{"gpu-device-plugin-inference", "1", "512Mi"},
		{"gpu-container-toolkit", "2", "256Mi"},
		{"gpu-feature-discovery", "10%", "64Mi"},
		{"gpu-node-agent", "10%", "128Mi"},
	} {
		ds := byName["DaemonSet/"+tc.ds]
		if ds == nil {
			t.Fatalf("no DaemonSet %s", tc.ds)
		}
		mu, _, _ := unstructured.NestedFieldNoCopy(ds.Object, "spec", "updateStrategy", "rollingUpdate", "maxUnavailable")
		if got := fmt.Sprint(mu); got != tc.maxUnavailable {
			t.Errorf("%s maxUnavailable %s, want %s", tc.ds, got, tc.maxUnavailable)
		}
		cs, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "containers")
		lim, _, _ := unstructured.NestedString(cs[0].(map[string]any), "resources", "limits", "memory")
		if lim != tc.memoryLimit {
			t.Errorf("%s memory limit %s, want %s", tc.ds, lim, tc.memoryLimit)
		}
	}
	sm := byName["ServiceMonitor/gpu-exporter"]
	if sm == nil || sm.GetLabels()["release"] != "kube-prometheus-stack" || sm.GetLabels()["app.kubernetes.io/name"] != "gpu-exporter" {
		t.Errorf("ServiceMonitor labels: %v", sm)
	}
	if byName["PrometheusRule/gpu-exporter"] != nil {
		t.Error("prometheusRule: false still renders the PrometheusRule")
	}
}
