package doctor

import (
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpupolicy/gpupolicy/fn/internal/fntest"
)

// apiServer answers the reads doctor makes with fixed objects, over HTTP, so Run is tested
// end to end through kubeconfig loading and client-go's decoding. extra adds routes (path →
// JSON body; a *metav1.Status is answered with its code).
func apiServer(t *testing.T, nodes []corev1.Node, pods []corev1.Pod, extra map[string]any) *httptest.Server {
	t.Helper()
	cm := agentConfigMap()
	cm.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}
	rc := policyRuntimeClass()
	rc.TypeMeta = metav1.TypeMeta{APIVersion: "node.k8s.io/v1", Kind: "RuntimeClass"}
	routes := map[string]any{
		"/api/v1/namespaces/gpu-system/configmaps/gpu-node-agent": cm,
		"/api/v1/nodes": &corev1.NodeList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "NodeList"}, Items: nodes},
		"/api/v1/pods":  &corev1.PodList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PodList"}, Items: pods},
		"/apis/node.k8s.io/v1/runtimeclasses/nvidia": rc,
	}
	maps.Copy(routes, extra)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		body, ok := routes[r.URL.Path]
		if !ok && strings.HasSuffix(r.URL.Path, "/events") {
			body, ok = &corev1.EventList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "EventList"}}, true
		}
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}`))
			return
		}
		if st, ok := body.(*metav1.Status); ok {
			w.WriteHeader(int(st.Code))
		}
		_ = json.NewEncoder(w).Encode(body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestRunExitCodes(t *testing.T) {
	healthy := apiServer(t, []corev1.Node{*gpuNode("gpu-a")}, nil, nil)
	code, stdout, stderr := fntest.Call(Run, Options{Kubeconfig: writeKubeconfig(t, healthy.URL)})
	if code != ExitOK || !strings.Contains(stdout, "No problems found.") {
		t.Errorf("healthy cluster: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}

	broken := apiServer(t, []corev1.Node{*gpuNode("gpu-a", driverDrifted)}, []corev1.Pod{*gpuPod("ml", "train", 1)}, nil)
	code, stdout, stderr = fntest.Call(Run, Options{Kubeconfig: writeKubeconfig(t, broken.URL), Format: "json", Pod: "ml/train"})
	var r Report
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("-o json: %v\n%s", err, stdout)
	}
	if code != ExitProblems || len(r.Pods) != 1 || r.Pods[0].FailedGate != PodGateGPUResource || !strings.Contains(r.Pods[0].Finding.Fix, "install driver 580.95.05") {
		t.Errorf("drifted cluster: exit %d, report %+v, stderr %q", code, r.Pods, stderr)
	}

	code, _, stderr = fntest.Call(Run, Options{Kubeconfig: writeKubeconfig(t, broken.URL), Node: "gpu-z"})
	if code != ExitFailed || !strings.Contains(stderr, "--node gpu-z: no such node") {
		t.Errorf("unknown node: exit %d, stderr %q", code, stderr)
	}
}
