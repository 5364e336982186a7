package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/gpupolicy/gpupolicy/e2e/internal/fakenode"
	"github.com/gpupolicy/gpupolicy/e2e/internal/gitops"
	"github.com/gpupolicy/gpupolicy/e2e/internal/stack"
)

// appsetClusters are examples/fleet's clusters and the stage each one's Secret carries.
var appsetClusters = map[string]string{"dev": "canary", "prod-eu": "prod", "prod-us": "prod", "airgap": "prod"}

// TestFleetApplicationSet runs Argo CD v3.6.2's own ApplicationSet controller (progressive
// syncs on) on examples/fleet/argocd/applicationset.yaml with a cluster Secret per cluster of
// examples/fleet: it must generate one Application per cluster as the template says, and roll
// them out by RollingSync: the canary (dev) first, then the prod clusters one at a time, each
// step only when the ones before are Healthy. The canary's health is real: its sync is Argo's
// gitops-engine sync of examples/fleet/rendered/dev.yaml (every wave applied and healthy)
// onto a control plane with kwok GPU nodes running the node programs. A first, broken version
// of the canary's output (a DaemonSet the API server refuses) fails its sync: the canary is
// Degraded and retried, and no prod cluster starts until the fix syncs every wave healthy. Argo CD's application
// controller cannot run here (it needs the repo server, Redis and the four clusters): a
// stand-in (gitops.AppControllerStandIn) reports the Applications' reconcile, sync and health
// as it would, and syncs the prod Applications without a cluster behind them.
func TestFleetApplicationSet(t *testing.T) {
	bins := gitopsBinaries(t)
	peers := fleetPeerBinaries(t, "appset")
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	start := time.Now()

	devPolicy, err := exec.Command(kustomizeBin(t), "build", filepath.Join(env.repoRoot, "examples", "fleet", "clusters", "dev", "policy")).Output()
	if err != nil {
		t.Fatalf("kustomize build examples/fleet/clusters/dev/policy: %v", err)
	}
	fe := newFleetEnvWith(t, "fleet-appset", fleetNodes("appset", 1, nil, nil), fakenode.ProbeReadiness, devPolicy, 0)
	t.Logf("control plane and %d nodes up in %s", len(fe.nodes), time.Since(start).Round(time.Second))
	if err := stack.InstallMonitoringCRDs(ctx, fe.cfg, peers.ArgoCDCRDs); err != nil {
		t.Fatalf("Argo CD %s CRDs: %v", gitops.ArgoCDVersion, err)
	}
	dyn, err := dynamic.NewForConfig(fe.cfg)
	if err != nil {
		t.Fatal(err)
	}
	// What an Argo CD installation has in its namespace: the settings the controller reads, the
	// default project, and one cluster Secret per cluster of the fleet.
	if _, err := fe.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: gitops.ArgoNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	argoLabels := map[string]string{"app.kubernetes.io/part-of": "argocd"}
	if _, err := fe.cs.CoreV1().ConfigMaps(gitops.ArgoNamespace).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "argocd-cm", Labels: argoLabels}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := fe.cs.CoreV1().Secrets(gitops.ArgoNamespace).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "argocd-secret", Labels: argoLabels}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	project := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "argoproj.io/v1alpha1", "kind": "AppProject",
		"metadata": map[string]any{"name": "default", "namespace": gitops.ArgoNamespace},
		"spec": map[string]any{
			"sourceRepos":              []any{"*"},
			"destinations":             []any{map[string]any{"server": "*", "namespace": "*"}},
			"clusterResourceWhitelist": []any{map[string]any{"group": "*", "kind": "*"}},
		},
	}}
	if _, err := dyn.Resource(gitops.AppProjectGVR).Namespace(gitops.ArgoNamespace).Create(ctx, project, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for c, stage := range appsetClusters {
		if _, err := fe.cs.CoreV1().Secrets(gitops.ArgoNamespace).Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "cluster-" + c, Labels: map[string]string{
				"argocd.argoproj.io/secret-type": "cluster", "gpupolicy.dev/fleet": "true", "gpupolicy.dev/stage": stage,
			}},
			StringData: map[string]string{"name": c, "server": "https://" + c + ".k8s.example.com", "config": "{}"},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	appset, err := gitops.StartApplicationSetController(ctx, peers.AppSetController, fe.c.Kubeconfig, filepath.Join(fe.dir, "logs"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(appset.Stop)

	// The stand-in syncs the canary with Argo's sync engine on what its Application applies:
	// first a broken commit (a hand edit of the committed output the API server refuses, in the
	// device plugin's wave), then the fix.
	devObjects := readObjects(t, filepath.Join(env.repoRoot, "examples", "fleet", "rendered", "dev.yaml"))
	var broken []*unstructured.Unstructured
	for _, o := range devObjects {
		if o.GetKind() == "DaemonSet" && o.GetName() == "gpu-device-plugin" {
			o = o.DeepCopy()
			must(t, unstructured.SetNestedField(o.Object, "Sometimes", "spec", "updateStrategy", "type"))
		}
		broken = append(broken, o)
	}
	var mu sync.Mutex
	canary := broken
	standIn := gitops.RunAppControllerStandIn(ctx, dyn, func(ctx context.Context, app string) error {
		if app != "gpu-dev" {
			time.Sleep(2 * time.Second) // a cluster that is not there: synced at once
			return nil
		}
		mu.Lock()
		objs := canary
		mu.Unlock()
		res, err := gitops.ArgoSync(ctx, bins.ArgoSync, fe.c.Kubeconfig, filepath.Join(fe.dir, "argo-dev"), objs, 5*time.Minute)
		for _, l := range res.Lines {
			t.Logf("   canary: %s", l)
		}
		return err
	})

	objs := readObjects(t, filepath.Join(env.repoRoot, "examples", "fleet", "argocd", "applicationset.yaml"))
	if _, err := dyn.Resource(gitops.ApplicationSetGVR).Namespace(gitops.ArgoNamespace).Create(ctx, objs[0], metav1.CreateOptions{FieldValidation: "Strict"}); err != nil {
		t.Fatalf("the example ApplicationSet against Argo CD's CRD: %v", err)
	}

	// One Application per cluster, as the template says.
	apps := dyn.Resource(gitops.ApplicationGVR).Namespace(gitops.ArgoNamespace)
	eventually(t, time.Minute, "an Application per cluster", func() (bool, string) {
		list, err := apps.List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var names []string
		for _, a := range list.Items {
			names = append(names, a.GetName())
		}
		slices.Sort(names)
		return slices.Equal(names, []string{"gpu-airgap", "gpu-dev", "gpu-prod-eu", "gpu-prod-us"}), fmt.Sprint(names)
	})
	for c, stage := range appsetClusters {
		a, err := apps.Get(ctx, "gpu-"+c, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		include, _, _ := unstructured.NestedString(a.Object, "spec", "source", "directory", "include")
		server, _, _ := unstructured.NestedString(a.Object, "spec", "destination", "server")
		path, _, _ := unstructured.NestedString(a.Object, "spec", "source", "path")
		// RollingSync triggers the syncs: the controller turns automated sync off (enabled: false)
		// and keeps prune, which it passes to each sync it starts.
		enabled, found, _ := unstructured.NestedBool(a.Object, "spec", "syncPolicy", "automated", "enabled")
		prune, _, _ := unstructured.NestedBool(a.Object, "spec", "syncPolicy", "automated", "prune")
		if a.GetLabels()["gpupolicy.dev/stage"] != stage || a.GetLabels()["gpupolicy.dev/cluster"] != c ||
			include != c+".yaml" || server != "https://"+c+".k8s.example.com" || path != "fleet/rendered" || !found || enabled || !prune {
			t.Errorf("Application gpu-%s: labels %v, path %s, include %s, server %s, automated enabled %v (set %v) prune %v", c, a.GetLabels(), path, include, server, enabled, found, prune)
		}
	}

	set := dyn.Resource(gitops.ApplicationSetGVR).Namespace(gitops.ArgoNamespace)

	// 1. The canary syncs but its driver wave is not healthy: it stays Progressing and no prod
	// Application moves, however long it takes.
	appStatus := func() map[string]string {
		s, err := set.Get(ctx, "gpu-fleet", metav1.GetOptions{})
		if err != nil {
			return nil
		}
		statuses, _, _ := unstructured.NestedSlice(s.Object, "status", "applicationStatus")
		state := map[string]string{}
		for _, x := range statuses {
			m, _ := x.(map[string]any)
			app, _ := m["application"].(string)
			state[app], _ = m["status"].(string)
		}
		return state
	}
	eventually(t, 2*time.Minute, "the canary's sync failed once, the canary Progressing, the prod clusters Waiting", func() (bool, string) {
		st := appStatus()
		syncs := standIn.Syncs()
		failed := len(syncs) > 0 && syncs[0].Failures > 0
		return failed && st["gpu-dev"] == "Progressing" && st["gpu-prod-eu"] == "Waiting" && st["gpu-prod-us"] == "Waiting" && st["gpu-airgap"] == "Waiting", fmt.Sprint(st)
	})
	for range 12 {
		time.Sleep(time.Second)
		if st := appStatus(); st["gpu-dev"] != "Progressing" || st["gpu-prod-eu"] != "Waiting" || st["gpu-prod-us"] != "Waiting" || st["gpu-airgap"] != "Waiting" {
			t.Fatalf("with the canary's sync failing the rollout moved: %v", st)
		}
	}
	t.Logf("  %6.1fs held: the canary's sync fails (Degraded, retrying), no prod cluster started", time.Since(start).Seconds())

	// 2. The fix lands: the next retry syncs every wave healthy, and the rollout goes on.
	mu.Lock()
	canary = devObjects
	mu.Unlock()

	// The rollout: watch the ApplicationSet's per-Application status until every one is
	// Healthy, checking at every look that no prod Application moves before the canary is
	// Healthy and that at most one prod Application is in flight.
	var lastSeen string
	eventually(t, 6*time.Minute, "every Application Healthy through the RollingSync steps", func() (bool, string) {
		s, err := set.Get(ctx, "gpu-fleet", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		statuses, _, _ := unstructured.NestedSlice(s.Object, "status", "applicationStatus")
		state := map[string]string{}
		var line []string
		for _, x := range statuses {
			m, _ := x.(map[string]any)
			app, _ := m["application"].(string)
			status, _ := m["status"].(string)
			step, _ := m["step"].(string)
			state[app] = status
			line = append(line, fmt.Sprintf("%s step %s %s", app, step, status))
			if want := map[bool]string{true: "1", false: "2"}[app == "gpu-dev"]; step != want {
				t.Errorf("%s is in step %s, want %s", app, step, want)
			}
		}
		slices.Sort(line)
		if l := strings.Join(line, "; "); l != lastSeen {
			lastSeen = l
			t.Logf("  %6.1fs %s", time.Since(start).Seconds(), l)
		}
		inFlight := 0
		for app, st := range state {
			if app == "gpu-dev" {
				continue
			}
			if st != "Waiting" && state["gpu-dev"] != "Healthy" {
				t.Errorf("%s is %s while the canary is %s", app, st, state["gpu-dev"])
			}
			if st == "Pending" || st == "Progressing" {
				inFlight++
			}
		}
		if inFlight > 1 {
			t.Errorf("%d prod Applications in flight at once (maxUpdate: 1): %v", inFlight, state)
		}
		done := len(state) == 4
		for _, st := range state {
			done = done && st == "Healthy"
		}
		return done, lastSeen
	})

	// The same order in the syncs the stand-in ran: the canary's first and Healthy before any
	// other started; the prod ones one after another.
	syncs := standIn.Syncs()
	var order []string
	for _, s := range syncs {
		order = append(order, s.App)
		if s.Err != nil {
			t.Errorf("sync of %s: %v", s.App, s.Err)
		}
	}
	if len(syncs) != 4 || syncs[0].App != "gpu-dev" {
		t.Fatalf("syncs in order %v; want gpu-dev first, then the three prod clusters once each", order)
	}
	for i := 1; i < len(syncs); i++ {
		if !syncs[i].Started.After(syncs[i-1].Healthy) {
			t.Errorf("%s started %s before %s was Healthy (%s)", syncs[i].App, syncs[i].Started.Format(time.TimeOnly), syncs[i-1].App, syncs[i-1].Healthy.Format(time.TimeOnly))
		}
	}
	t.Logf("rollout order %v; the canary took %s (a real sync of its waves)", order, syncs[0].Healthy.Sub(syncs[0].Started).Round(time.Second))
	fe.waitNodes(t, 2*time.Minute)
	fe.checkNoViolations(t)
}

func kustomizeBin(t *testing.T) string {
	t.Helper()
	k, err := stack.KustomizeBinary()
	if err != nil {
		t.Fatal(err)
	}
	return k
}
