package realnode

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fluxcd/pkg/ssa/utils"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/gpupolicy/gpupolicy/e2e/internal/stack"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// rendered is one version's stack as kustomize built it.
type rendered struct {
	objects []*unstructured.Unstructured
	ns      string
	agent   config.Agent // the rendered agent config (ConfigMap gpu-node-agent)
	dropIn  string       // the rendered drop-in (ConfigMap gpu-containerd-drop-in)
	// daemonSets by name; images the stack runs (the toolkit stand-in's ref among them).
	daemonSets map[string]*appsv1.DaemonSet
}

// render runs real kustomize on testdata/<dir>: the policy through gpupolicy-fn (exec KRM
// function) and the suite's test-only patches.
func render(t *testing.T, dir string) *rendered {
	t.Helper()
	k, err := stack.KustomizeBinary()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(env.repoRoot, "bin", "gpupolicy-fn")); err != nil {
		t.Fatalf("bin/gpupolicy-fn is missing: run `make build` (e2e/run.sh does)")
	}
	objs, err := stack.Kustomize(context.Background(), k, filepath.Join(env.repoRoot, "e2e", "realnode", "testdata", dir))
	if err != nil {
		t.Fatal(err)
	}
	r := &rendered{objects: objs, daemonSets: map[string]*appsv1.DaemonSet{}}
	for _, o := range objs {
		switch o.GetKind() {
		case "Namespace":
			r.ns = o.GetName()
		case "DaemonSet":
			var ds appsv1.DaemonSet
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &ds); err != nil {
				t.Fatal(err)
			}
			r.daemonSets[ds.Name] = &ds
		case "ConfigMap":
			data, _, _ := unstructured.NestedStringMap(o.Object, "data")
			switch o.GetName() {
			case config.AgentConfigMap:
				if err := yaml.Unmarshal([]byte(data["config.yaml"]), &r.agent); err != nil {
					t.Fatalf("rendered agent config: %v", err)
				}
			case config.DropInConfigMap:
				r.dropIn = data[config.DropInFile]
			}
		}
	}
	if r.ns == "" || r.dropIn == "" || r.agent.Toolkit.DropInSHA256 == "" {
		t.Fatalf("rendered stack of %s lacks the namespace, the drop-in or the agent config", dir)
	}
	return r
}

// reseal recomputes what gpupolicy-fn derives from the ConfigMaps after a test-only patch
// changed one: the agent config's dropInSHA256 and every pod template's
// gpupolicy.dev/config-sha256 (the sha256 of its ConfigMap's content), so the patched stack is
// what the function would have rendered from such a drop-in.
func (r *rendered) reseal(t *testing.T) {
	t.Helper()
	sum := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	oldDropIn, newDropIn := r.agent.Toolkit.DropInSHA256, sum(r.dropIn)
	var agentCM *unstructured.Unstructured
	for _, o := range r.objects {
		if o.GetKind() == "ConfigMap" && o.GetName() == config.AgentConfigMap {
			agentCM = o
		}
	}
	data, _, _ := unstructured.NestedString(agentCM.Object, "data", config.AgentConfigFile)
	oldAgent := sum(data)
	data = strings.ReplaceAll(data, oldDropIn, newDropIn)
	if err := unstructured.SetNestedField(agentCM.Object, data, "data", config.AgentConfigFile); err != nil {
		t.Fatal(err)
	}
	newAgent := sum(data)
	for _, o := range r.objects {
		if o.GetKind() != "DaemonSet" {
			continue
		}
		path := []string{"spec", "template", "metadata", "annotations", "gpupolicy.dev/config-sha256"}
		v, _, _ := unstructured.NestedString(o.Object, path...)
		switch v {
		case oldDropIn:
			v = newDropIn
		case oldAgent:
			v = newAgent
		default:
			continue
		}
		if err := unstructured.SetNestedField(o.Object, v, path...); err != nil {
			t.Fatal(err)
		}
	}
	r.agent.Toolkit.DropInSHA256 = newDropIn
}

// toolkitImage is the image of the toolkit DaemonSet's toolkit-copy init container (NVIDIA's
// installer; the suite imports a stand-in under this ref).
func (r *rendered) toolkitImage(t *testing.T) string {
	t.Helper()
	for _, ds := range r.daemonSets {
		for _, c := range ds.Spec.Template.Spec.InitContainers {
			if c.Name == "toolkit-copy" {
				return c.Image
			}
		}
	}
	t.Fatal("no toolkit-copy init container in the rendered stack")
	return ""
}

// apply applies the stack wave by wave as Argo CD would, through Flux's SSA engine (strict
// field validation, any API warning fails), each wave waited for with kstatus. DaemonSets
// with no node yet are Current at once, so this finishes before the node joins.
func apply(t *testing.T, r *rendered) {
	t.Helper()
	a, err := stack.NewApplier(env.cfg, "argocd-controller")
	if err != nil {
		t.Fatal(err)
	}
	waves, err := stack.ByWave(r.objects)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range waves {
		if _, err := a.Apply(context.Background(), fmt.Sprintf("wave %d", w.Number), w.Objects); err != nil {
			t.Fatal(err)
		}
	}
}

// reapply applies a changed render of the same stack in one go (a later Git revision synced).
func reapply(t *testing.T, r *rendered) {
	t.Helper()
	a, err := stack.NewApplier(env.cfg, "argocd-controller")
	if err != nil {
		t.Fatal(err)
	}
	a.Timeout = 10 * time.Second
	if _, err := a.Apply(context.Background(), "update", r.objects); err != nil {
		// DaemonSets whose pods cannot become ready on purpose (the broken drop-in) time out
		// in kstatus; the apply itself must have gone through.
		first, _, _ := strings.Cut(err.Error(), "\n")
		t.Logf("re-apply (waiting is not the point here): %s", first)
	}
}

// deleteStack removes every object of the stack and waits until the namespace is gone (its
// pods stopped by the node's kubelet). Pods the node can no longer stop are force-deleted.
func deleteStack(t *testing.T, r *rendered) {
	t.Helper()
	ctx := context.Background()
	a, err := stack.NewApplier(env.cfg, "argocd-controller")
	if err != nil {
		t.Error(err)
		return
	}
	c := a.Client()
	for i := len(r.objects) - 1; i >= 0; i-- {
		o := r.objects[i].DeepCopy()
		if err := c.Delete(ctx, o, client.PropagationPolicy(metav1.DeletePropagationBackground)); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete %s: %v", utils.FmtUnstructured(o), err)
		}
	}
	deadline := time.Now().Add(90 * time.Second)
	forced := false
	for {
		_, err := env.cs.CoreV1().Namespaces().Get(ctx, r.ns, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return
		}
		if time.Now().After(deadline) {
			pods, _ := env.cs.CoreV1().Pods(r.ns).List(ctx, metav1.ListOptions{})
			t.Errorf("namespace %s still there 90s after the stack was deleted; pods:\n  %s", r.ns, podSummary(pods.Items))
			return
		}
		if !forced && time.Until(deadline) < 45*time.Second {
			forced = true
			forceDeletePods(r.ns)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func forceDeletePods(ns string) {
	ctx := context.Background()
	pods, err := env.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	zero := int64(0)
	for _, p := range pods.Items {
		_ = env.cs.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	}
}

// stagePod is the node's pod of DaemonSet ds (nil if none yet).
func stagePod(t *testing.T, ns, ds, node string) *corev1.Pod {
	t.Helper()
	pods, err := env.cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	var found *corev1.Pod
	for i := range pods.Items {
		p := &pods.Items[i]
		if ref := metav1.GetControllerOf(p); ref != nil && ref.Name == ds && p.DeletionTimestamp == nil {
			if found == nil || p.CreationTimestamp.After(found.CreationTimestamp.Time) {
				found = p
			}
		}
	}
	return found
}
