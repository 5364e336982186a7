package doctor

import (
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/gpupolicy/gpupolicy/fn/internal/fntest"
)

// TestRunAgainstPolicyOverHTTP is TestObjectsAgainstPolicy through Run and the binary's REST
// reads instead of client-go's fakes: discovery per group version, the dynamic client's gets,
// NotFound for the deleted DaemonSet and the unserved monitoring group. The report must be the
// same, byte for byte.
func TestRunAgainstPolicyOverHTTP(t *testing.T) {
	_, live := driftedCluster(t)
	routes := discoveryRoutes(t)
	for _, o := range live {
		u := o.(*unstructured.Unstructured)
		routes[objectPath(t, u)] = u.Object
	}
	srv := apiServer(t, []corev1.Node{*gpuNode("gpu-a")}, nil, routes)

	code, stdout, stderr := fntest.Call(Run, Options{Kubeconfig: writeKubeconfig(t, srv.URL), Policy: "testdata/rendered", Format: "json"})
	want, err := os.ReadFile("testdata/objects-against-policy.json")
	if err != nil {
		t.Fatal(err)
	}
	if code != ExitProblems || stdout != string(want) {
		t.Errorf("exit %d, stderr %q; report differs from testdata/objects-against-policy.json:\n%s", code, stderr, stdout)
	}
}

// discoveryRoutes serve servedAPIs as the API server's discovery documents.
func discoveryRoutes(t *testing.T) map[string]any {
	t.Helper()
	routes := map[string]any{}
	for _, list := range servedAPIs {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil {
			t.Fatal(err)
		}
		routes[discoveryPath(gv)] = list
	}
	return routes
}

// objectPath is where the API server serves o, by the resources of servedAPIs.
func objectPath(t *testing.T, o *unstructured.Unstructured) string {
	t.Helper()
	gv := o.GroupVersionKind().GroupVersion()
	for _, list := range servedAPIs {
		if list.GroupVersion != gv.String() {
			continue
		}
		for _, r := range list.APIResources {
			if r.Kind != o.GetKind() {
				continue
			}
			path := discoveryPath(gv)
			if r.Namespaced {
				path += "/namespaces/" + o.GetNamespace()
			}
			return path + "/" + r.Name + "/" + o.GetName()
		}
	}
	t.Fatalf("%s %s is not in servedAPIs", o.GetAPIVersion(), o.GetKind())
	return ""
}

// TestDiscoveryForbidden: when RBAC hides a group version's discovery document its objects are
// not compared, the report says so, and the rest of the diagnosis stands.
func TestDiscoveryForbidden(t *testing.T) {
	_, live := driftedCluster(t)
	routes := discoveryRoutes(t)
	for _, o := range live {
		u := o.(*unstructured.Unstructured)
		routes[objectPath(t, u)] = u.Object
	}
	routes["/apis/apps/v1"] = &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
		Reason: metav1.StatusReasonForbidden, Code: 403, Message: `forbidden: User "viewer" cannot get path "/apis/apps/v1"`}
	srv := apiServer(t, []corev1.Node{*gpuNode("gpu-a")}, nil, routes)

	code, stdout, stderr := fntest.Call(Run, Options{Kubeconfig: writeKubeconfig(t, srv.URL), Policy: "testdata/rendered"})
	if code != ExitProblems || !strings.Contains(stdout, `RBAC forbids get API discovery (/apis/apps/v1)`) ||
		!strings.Contains(stdout, "its objects are not compared") || strings.Contains(stdout, "gpu-device-plugin differs") {
		t.Errorf("exit %d, stderr %q, stdout:\n%s", code, stderr, stdout)
	}
}
