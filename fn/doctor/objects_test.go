package doctor

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpupolicy/gpupolicy/fn/doctor/doctortest"
)

// servedAPIs is the discovery document of a cluster without the Prometheus Operator CRDs.
var servedAPIs = []*metav1.APIResourceList{
	{GroupVersion: "v1", APIResources: []metav1.APIResource{
		{Name: "namespaces", Kind: "Namespace", Verbs: metav1.Verbs{"get", "list"}},
		{Name: "configmaps", Kind: "ConfigMap", Namespaced: true, Verbs: metav1.Verbs{"get", "list"}},
		{Name: "nodes", Kind: "Node", Verbs: metav1.Verbs{"get", "list"}},
	}},
	{GroupVersion: "apps/v1", APIResources: []metav1.APIResource{
		{Name: "daemonsets", Kind: "DaemonSet", Namespaced: true, Verbs: metav1.Verbs{"get", "list"}},
	}},
	{GroupVersion: "node.k8s.io/v1", APIResources: []metav1.APIResource{
		{Name: "runtimeclasses", Kind: "RuntimeClass", Verbs: metav1.Verbs{"get", "list"}},
	}},
}

// liveCopy is what the API server returns for an applied object: the rendered fields plus
// defaults and managed metadata, which must not count as changes.
func liveCopy(o *unstructured.Unstructured) *unstructured.Unstructured {
	live := o.DeepCopy()
	live.SetUID("1b4e28ba-2fa1-11d2-883f-0016d3cca427")
	live.SetResourceVersion("4711")
	labels := live.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels["argocd.argoproj.io/instance"] = "gpu-stack"
	live.SetLabels(labels)
	if live.GetKind() == "DaemonSet" {
		_ = unstructured.SetNestedField(live.Object, "Always", "spec", "template", "spec", "restartPolicy")
		_ = unstructured.SetNestedField(live.Object, int64(10), "spec", "revisionHistoryLimit")
		_ = unstructured.SetNestedMap(live.Object, map[string]any{"numberReady": int64(2)}, "status")
	}
	return live
}

// driftedCluster is what a cluster holds of testdata/rendered after someone deleted the exporter
// DaemonSet and edited the device plugin's, without the Prometheus Operator CRDs.
func driftedCluster(t *testing.T) (*Expected, []runtime.Object) {
	t.Helper()
	exp := expectedFrom("testdata/rendered")
	rendered, err := exp.Objects(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var live []runtime.Object
	for _, o := range rendered {
		switch {
		case localOnly(o), o.GetKind() == "ServiceMonitor":
		case o.GetName() == "gpu-exporter":
			// deleted by hand: must be reported missing
		case o.GetName() == "gpu-device-plugin":
			l := liveCopy(o)
			containers, _, _ := unstructured.NestedSlice(l.Object, "spec", "template", "spec", "containers")
			containers[0].(map[string]any)["image"] = "ghcr.io/gpupolicy/gpupolicy:v0.0.9"
			_ = unstructured.SetNestedSlice(l.Object, containers, "spec", "template", "spec", "containers")
			unstructured.RemoveNestedField(l.Object, "spec", "template", "spec", "runtimeClassName")
			live = append(live, l)
		default:
			live = append(live, liveCopy(o))
		}
	}
	return exp, live
}

func TestObjectsAgainstPolicy(t *testing.T) {
	exp, live := driftedCluster(t)
	client := fake.NewClientset(gpuNode("gpu-a"), policyRuntimeClass())
	client.Resources = servedAPIs
	in := Input{Cluster: doctortest.FromClientset(client), Objects: doctortest.FakeDynamic(live...), Expected: exp}
	r := diagnoseCase(t, "objects-against-policy", in, nil)

	if r.Expectations.Source != "policy testdata/rendered" || r.Expectations.DriverVersion != testDriver {
		t.Errorf("expectations must come from the rendered agent ConfigMap: %+v", r.Expectations)
	}
	// Namespace, RuntimeClass, ConfigMap, 3 DaemonSets, ServiceMonitor; kustomization.yaml skipped.
	if r.ObjectsChecked != 7 {
		t.Errorf("want 7 rendered objects checked, got %d", r.ObjectsChecked)
	}
	got := map[string]ObjectFinding{}
	for _, o := range r.Objects {
		got[o.Kind+"/"+o.Name] = o
	}
	if len(got) != 3 {
		t.Errorf("want 3 object findings, got %+v", r.Objects)
	}
	if f := got["DaemonSet/gpu-exporter"]; f.Check != "object-missing" {
		t.Errorf("gpu-exporter: want object-missing, got %+v", f)
	}
	if f := got["ServiceMonitor/gpu-exporter"]; f.Check != "kind-not-served" {
		t.Errorf("ServiceMonitor: want kind-not-served, got %+v", f)
	}
	changed := got["DaemonSet/gpu-device-plugin"]
	want := []string{
		`.spec.template.spec.containers[0].image: want "ghcr.io/gpupolicy/gpupolicy:v0.1.0", have "ghcr.io/gpupolicy/gpupolicy:v0.0.9"`,
		`.spec.template.spec.runtimeClassName: want "nvidia", have nothing`,
	}
	if changed.Check != "object-changed" || strings.Join(changed.Changes, "\n") != strings.Join(want, "\n") {
		t.Errorf("gpu-device-plugin changes:\n got %q\nwant %q", changed.Changes, want)
	}
}

func TestDiffSubset(t *testing.T) {
	for _, tc := range []struct {
		name       string
		want, live map[string]any
		changes    []string
	}{
		{"defaults are not changes",
			map[string]any{"spec": map[string]any{"replicas": int64(1)}},
			map[string]any{"spec": map[string]any{"replicas": float64(1), "paused": false}, "status": map[string]any{"x": int64(1)}}, nil},
		{"empty rendered fields equal absent ones",
			map[string]any{"spec": map[string]any{"tolerations": []any{}, "nodeSelector": map[string]any{}}},
			map[string]any{"spec": map[string]any{}}, nil},
		{"list length",
			map[string]any{"args": []any{"a", "b"}}, map[string]any{"args": []any{"a"}},
			[]string{`.args: want 2 item(s), have ["a"]`}},
		{"managed metadata ignored, labels compared",
			map[string]any{"metadata": map[string]any{"name": "x", "labels": map[string]any{"app": "gpu"},
				"annotations": map[string]any{"config.kubernetes.io/index": "0"}}},
			map[string]any{"metadata": map[string]any{"name": "x", "labels": map[string]any{"app": "cpu"}}},
			[]string{`.metadata.labels.app: want "gpu", have "cpu"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := diffSubset(tc.want, tc.live)
			if strings.Join(got, "\n") != strings.Join(tc.changes, "\n") {
				t.Errorf("got %q, want %q", got, tc.changes)
			}
		})
	}
}

func TestExpectedFromNamesTheFlag(t *testing.T) {
	if _, err := expectedFrom("testdata/missing-dir").Objects(context.Background()); err == nil || !strings.Contains(err.Error(), "-f testdata/missing-dir") {
		t.Errorf("want -f named in the error, got %v", err)
	}
}
