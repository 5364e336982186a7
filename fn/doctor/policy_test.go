package doctor

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gpupolicy/gpupolicy/fn/doctor/doctortest"
	"github.com/gpupolicy/gpupolicy/fn/internal/fntest"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

// fullAPIs serves every kind the renderer emits for the default policy; monitoring says whether
// the Prometheus Operator CRDs are installed.
func fullAPIs(monitoring bool) []*metav1.APIResourceList {
	res := func(name, kind string, namespaced bool) metav1.APIResource {
		return metav1.APIResource{Name: name, Kind: kind, Namespaced: namespaced, Verbs: metav1.Verbs{"get", "list"}}
	}
	lists := []*metav1.APIResourceList{
		{GroupVersion: "v1", APIResources: []metav1.APIResource{res("namespaces", "Namespace", false), res("configmaps", "ConfigMap", true),
			res("serviceaccounts", "ServiceAccount", true), res("services", "Service", true), res("nodes", "Node", false)}},
		{GroupVersion: "apps/v1", APIResources: []metav1.APIResource{res("daemonsets", "DaemonSet", true)}},
		{GroupVersion: "node.k8s.io/v1", APIResources: []metav1.APIResource{res("runtimeclasses", "RuntimeClass", false)}},
		{GroupVersion: "rbac.authorization.k8s.io/v1", APIResources: []metav1.APIResource{res("clusterroles", "ClusterRole", false),
			res("clusterrolebindings", "ClusterRoleBinding", false), res("roles", "Role", true), res("rolebindings", "RoleBinding", true)}},
		{GroupVersion: "admissionregistration.k8s.io/v1", APIResources: []metav1.APIResource{
			res("validatingadmissionpolicies", "ValidatingAdmissionPolicy", false), res("validatingadmissionpolicybindings", "ValidatingAdmissionPolicyBinding", false)}},
	}
	if monitoring {
		lists = append(lists, &metav1.APIResourceList{GroupVersion: "monitoring.coreos.com/v1", APIResources: []metav1.APIResource{
			res("servicemonitors", "ServiceMonitor", true), res("prometheusrules", "PrometheusRule", true)}})
	}
	return lists
}

// TestPolicyFile renders a real GPUPolicy through the function's pipeline and compares the
// output with a cluster that applied it: an in-sync cluster has no object findings.
func TestPolicyFile(t *testing.T) {
	exp := expectedFrom("testdata/policy.yaml")
	rendered, err := exp.Objects(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var live []runtime.Object
	for _, o := range rendered {
		live = append(live, liveCopy(o))
	}
	for _, monitoring := range []bool{true, false} {
		client := fake.NewClientset(gpuNode("gpu-a"), policyRuntimeClass())
		client.Resources = fullAPIs(monitoring)
		in := Input{Cluster: doctortest.FromClientset(client), Objects: doctortest.FakeDynamic(live...), Expected: exp}
		r, err := Diagnose(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		if r.ObjectsChecked != len(rendered) || r.ObjectsRendered != len(rendered) {
			t.Errorf("checked %d of %d rendered objects", r.ObjectsChecked, len(rendered))
		}
		e := r.Expectations
		if e.DriverVersion != "580.95.05" || e.DriverEnforce != "branch" || e.RuntimeClassName != "nvidia" ||
			selectorString(e.EntrySelector) != "nvidia.com/gpu.present=true" || e.Namespace != "gpu-system" {
			t.Errorf("expectations from the rendered policy: %+v", e)
		}
		var kinds []string
		for _, f := range r.Objects {
			kinds = append(kinds, f.Check+" "+f.Kind)
		}
		want := ""
		if !monitoring {
			want = "kind-not-served PrometheusRule,kind-not-served ServiceMonitor"
		}
		if got := strings.Join(kinds, ","); got != want {
			t.Errorf("monitoring=%v: object findings %q, want %q (%+v)", monitoring, got, want, r.Objects)
		}
	}
}

func TestPolicyFileInvalid(t *testing.T) {
	_, err := expectedFrom("testdata/invalid-policy.yaml").Objects(context.Background())
	if err == nil || !strings.Contains(err.Error(), "-f testdata/invalid-policy.yaml is not a valid GPUPolicy") || !strings.Contains(err.Error(), "spec.driver.version") {
		t.Errorf("want the validation results naming the field, got %v", err)
	}
}

// TestRenderedDirEqualsPolicy: -f DIR of `gpupolicy-fn render -o DIR` expects the same objects
// as -f POLICY, for both the Argo CD layout and Flux's one directory per stage.
func TestRenderedDirEqualsPolicy(t *testing.T) {
	for _, gitops := range []string{"argocd", "flux"} {
		t.Run(gitops, func(t *testing.T) {
			data, err := os.ReadFile("testdata/policy.yaml")
			if err != nil {
				t.Fatal(err)
			}
			policy := filepath.Join(t.TempDir(), "policy.yaml")
			if err := os.WriteFile(policy, []byte(strings.Replace(string(data), "spec:\n", "spec:\n  gitops: "+gitops+"\n", 1)), 0o644); err != nil {
				t.Fatal(err)
			}
			dir := fntest.WriteTree(t, policy)
			fromPolicy, err := expectedFrom(policy).Objects(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			fromDir, err := expectedFrom(dir).Objects(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			keys := func(objs []*unstructured.Unstructured) map[string]bool {
				m := map[string]bool{}
				for _, o := range objs {
					if !localOnly(o) && o.GroupVersionKind().Group != "kustomize.toolkit.fluxcd.io" {
						m[objectKey(o)] = true
					}
				}
				return m
			}
			a, b := keys(fromPolicy), keys(fromDir)
			if len(a) == 0 || len(a) != len(b) {
				t.Fatalf("policy renders %d objects, the directory holds %d", len(a), len(b))
			}
			for k := range a {
				if !b[k] {
					t.Errorf("%s rendered from the policy but not in the directory", k)
				}
			}
			if _, err := expectationsFromObjects("dir", fromDir); err != nil {
				t.Errorf("expectations from the directory: %v", err)
			}
		})
	}
}
