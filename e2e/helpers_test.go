package e2e

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	"github.com/gpupolicy/gpupolicy/e2e/internal/fakenode"
	"github.com/gpupolicy/gpupolicy/e2e/internal/wait"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// eventually is wait.Eventually without a wider diagnosis: cond's last state says what was seen.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	wait.Eventually(t, timeout, what, nil, cond)
}

// joinNode registers a fake node, waits until kwok reports it Ready and removes it when the
// test ends (its pods are garbage-collected with it).
func joinNode(t *testing.T, s fakenode.Spec) {
	t.Helper()
	ctx := context.Background()
	if _, err := fakenode.Join(ctx, env.cs, s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.cs.CoreV1().Nodes().Delete(context.Background(), s.Name, metav1.DeleteOptions{})
	})
	if err := fakenode.WaitReady(ctx, env.cs, s.Name, time.Minute); err != nil {
		t.Fatal(err)
	}
}

// joinGPUNode registers a GPU node with extra labels (a pool's selector) and an empty host:
// no driver loaded, nothing installed. Its agent starts when kwok runs its agent pod; see
// Fleet.AddHost for installsToolkit.
func joinGPUNode(t *testing.T, d *deployment, name string, labels map[string]string, installsToolkit bool) *fakenode.Host {
	t.Helper()
	h, err := d.fleet.AddHost(name, installsToolkit)
	if err != nil {
		t.Fatal(err)
	}
	joinNode(t, fakenode.Spec{Name: name, GPU: true, Labels: labels})
	// Runs before joinNode's node deletion: stop the agent, then check what it logged.
	t.Cleanup(func() {
		d.fleet.RemoveHost(name)
		for _, err := range d.fleet.Errors(name) {
			t.Errorf("node agent on %s: %v", name, err)
		}
	})
	return h
}

// stagePods lists the pods of the DaemonSets gated by gate on node, as "ds/phase".
func stagePods(t *testing.T, d *deployment, gate, node string) []string {
	t.Helper()
	return podsOf(t, d, d.stageDaemonSets[gate], node)
}

func podsOf(t *testing.T, d *deployment, dss []*appsv1.DaemonSet, node string) []string {
	t.Helper()
	names := map[string]bool{}
	for _, ds := range dss {
		names[ds.Name] = true
	}
	pods, err := env.cs.CoreV1().Pods(d.ns).List(context.Background(), metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range pods.Items {
		ref := metav1.GetControllerOf(&p)
		if ref == nil || !names[ref.Name] || p.DeletionTimestamp != nil {
			continue
		}
		out = append(out, ref.Name+"/"+string(p.Status.Phase))
	}
	sort.Strings(out)
	return out
}

func running(pods []string) bool {
	for _, p := range pods {
		if !strings.HasSuffix(p, "/"+string(corev1.PodRunning)) {
			return false
		}
	}
	return len(pods) > 0
}

func nodeLabels(t *testing.T, name string) map[string]string {
	t.Helper()
	n, err := env.cs.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n.Labels
}

func nvidiaLabels(t *testing.T, name string) string {
	t.Helper()
	var out []string
	for k, v := range nodeLabels(t, name) {
		if strings.HasPrefix(k, "nvidia.com/") {
			out = append(out, k+"="+v)
		}
	}
	sort.Strings(out)
	return fmt.Sprint(out)
}

// selects reports whether ds's pods would be placed on a GPU node with every gate open and
// the given extra labels (e.g. a pool's nodeSelector), by the scheduler's own matching code.
func selects(ds *appsv1.DaemonSet, extra map[string]string) bool {
	labels := map[string]string{
		config.LabelGPUPresent: "true", config.LabelDeployDriver: "true", config.LabelDeployToolkit: "true",
		config.LabelDeployDevicePlugin: "true", config.LabelToolkitReady: "true",
		config.LabelDeployFeatureDiscovery: "true", config.LabelDeployExporter: "true",
		"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
	}
	for k, v := range extra {
		labels[k] = v
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "probe", Labels: labels}}
	pod := &corev1.Pod{Spec: ds.Spec.Template.Spec}
	ok, err := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node)
	return err == nil && ok
}

func isAlreadyExists(err error) bool { return apierrors.IsAlreadyExists(err) }

func numCPU() int { return runtime.NumCPU() }

// failOnAgentProblems stops a wait as soon as node's agent logged a problem: waiting longer
// for a gate the agent cannot open only hides the reason.
func failOnAgentProblems(t *testing.T, d *deployment, node string) {
	t.Helper()
	if errs := d.fleet.LiveProblems(node); len(errs) > 0 {
		t.Fatalf("node agent on %s: %v", node, errs[0])
	}
}
