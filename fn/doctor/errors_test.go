package doctor

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gpupolicy/gpupolicy/fn/doctor/doctortest"
	"github.com/gpupolicy/gpupolicy/fn/internal/fntest"
)

// forbid makes the fake API server refuse verb on resource as RBAC would.
func forbid(c *fake.Clientset, verb, group, resource string) {
	c.PrependReactor(verb, resource, func(a k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: group, Resource: resource}, "",
			fmt.Errorf(`User "system:serviceaccount:default:viewer" cannot %s resource %q`, verb, resource))
	})
}

func TestForbiddenEssentialRead(t *testing.T) {
	for _, resource := range []string{"nodes", "pods"} {
		c := fake.NewClientset(gpuNode("gpu-a"), agentConfigMap(), policyRuntimeClass())
		forbid(c, "list", "", resource)
		_, err := Diagnose(context.Background(), Input{Cluster: doctortest.FromClientset(c)})
		if err == nil || !strings.Contains(err.Error(), "RBAC forbids list "+resource+" cluster-wide") ||
			!strings.Contains(err.Error(), `grant the verb "list" on "`+resource+`"`) || !strings.Contains(err.Error(), "needs get/list on nodes") {
			t.Errorf("%s: want an RBAC error naming verb and resource, got %v", resource, err)
		}
	}
}

// TestForbiddenOptionalReads: events, RuntimeClasses and the agent ConfigMap are judged
// without, and the report says what was not checked.
func TestForbiddenOptionalReads(t *testing.T) {
	train := gpuPod("default", "train", 1)
	c := fake.NewClientset(gpuNode("gpu-a", toolkitBroken), train, agentConfigMap(), policyRuntimeClass())
	forbid(c, "list", "", "events")
	forbid(c, "get", "node.k8s.io", "runtimeclasses")
	forbid(c, "get", "", "configmaps")
	r := diagnoseCase(t, "forbidden-optional-reads", Input{Cluster: doctortest.FromClientset(c)}, nil)
	notes := strings.Join(r.Notes, "\n")
	for _, want := range []string{
		"RBAC forbids get configmaps gpu-node-agent in namespace gpu-system",
		"RBAC forbids get runtimeclasses.node.k8s.io nvidia",
		"RBAC forbids list events in namespace default",
	} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}
	if len(r.Pods) != 1 || r.Pods[0].FailedGate != PodGateGPUResource {
		t.Errorf("the pod must still be diagnosed: %+v", r.Pods)
	}
}

func writeKubeconfig(t *testing.T, server string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster: {server: %q}
users:
- name: viewer
  user: {token: not-a-secret}
contexts:
- name: test
  context: {cluster: test, user: viewer}
current-context: test
`, server)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestRunUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there any more
	code, _, stderr := fntest.Call(Run, Options{Kubeconfig: writeKubeconfig(t, url)})
	if code != ExitFailed || !strings.Contains(stderr, "cannot reach "+url) || !strings.Contains(stderr, "--kubeconfig/--context") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}

// TestRunForbidden goes through Run, client-go and HTTP: an API server that answers 403 to
// everything, as RBAC does for an identity without rights.
func TestRunForbidden(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprintf(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403,"message":"forbidden: %s %s"}`, r.Method, r.URL.Path)
	}))
	defer srv.Close()
	code, _, stderr := fntest.Call(Run, Options{Kubeconfig: writeKubeconfig(t, srv.URL), Format: "json"})
	if code != ExitFailed || !strings.Contains(stderr, "RBAC forbids list nodes") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}

// TestRunOptions: bad options and kubeconfigs fail before any read; the flags themselves are
// fn/cli's (TestDoctorFlags).
func TestRunOptions(t *testing.T) {
	for _, tc := range []struct {
		opts Options
		code int
		msg  string
	}{
		{Options{Format: "yaml"}, ExitFailed, `-o "yaml": want table or json`},
		{Options{Pod: "train"}, ExitFailed, `--pod "train": want NAMESPACE/NAME`},
		{Options{Kubeconfig: "testdata/no-such-kubeconfig"}, ExitFailed, "loading the kubeconfig"},
		{Options{Kubeconfig: writeKubeconfig(t, "https://127.0.0.1:1"), Context: "prod"}, ExitFailed, `context "prod" does not exist`},
	} {
		code, _, stderr := fntest.Call(Run, tc.opts)
		if code != tc.code || !strings.Contains(stderr, tc.msg) {
			t.Errorf("%+v: exit %d, stderr %q; want exit %d and %q", tc.opts, code, stderr, tc.code, tc.msg)
		}
	}
}
