package e2e

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpupolicy/gpupolicy/e2e/internal/cluster"
	"github.com/gpupolicy/gpupolicy/e2e/internal/stack"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// TestFluxLayoutStages applies examples/flux the way kustomize-controller would: stage by
// stage in dependsOn order, each waited for (kstatus) before the next. It runs on a fresh
// control plane of its own, so every stage meets only what its dependencies created: a
// stage that needs an object of a later stage fails here.
func TestFluxLayoutStages(t *testing.T) {
	k, err := stack.KustomizeBinary()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	stages, err := stack.LoadFluxLayout(ctx, k, env.repoRoot, filepath.Join(env.repoRoot, "examples", "flux"))
	if err != nil {
		t.Fatal(err)
	}
	c := ownControlPlane(t, filepath.Join(env.workDir, "flux-cluster"), cluster.Options{})
	if err := stack.InstallMonitoringCRDs(ctx, c.RESTConfig(), filepath.Join(env.repoRoot, "e2e", "testdata", "crds")); err != nil {
		t.Fatal(err)
	}
	a, err := stack.NewApplier(c.RESTConfig(), "kustomize-controller")
	if err != nil {
		t.Fatal(err)
	}
	// The dependsOn chain must put the stage DaemonSets in gate order.
	stageOf := map[string]int{}
	for i, s := range stages {
		for _, o := range s.Objects {
			if o.GetKind() != "DaemonSet" {
				continue
			}
			var ds appsv1.DaemonSet
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &ds); err != nil {
				t.Fatal(err)
			}
			if g := gateLabel(&ds); g != "" {
				if _, seen := stageOf[g]; !seen {
					stageOf[g] = i
				}
			}
		}
	}
	gates := []string{config.LabelDeployDriver, config.LabelDeployToolkit, config.LabelDeployDevicePlugin}
	for i := 1; i < len(gates); i++ {
		prev, ok1 := stageOf[gates[i-1]]
		cur, ok2 := stageOf[gates[i]]
		if !ok1 || !ok2 || prev >= cur {
			t.Errorf("stage order %v: the %s DaemonSets must come in a stage after the %s ones", stageOf, gates[i], gates[i-1])
		}
	}

	// The Flux example renders the same fleet as examples/kustomize: same objects, only the
	// ordering metadata differs.
	if os.Getenv("E2E_STACK") != "testdata" {
		argo, err := renderStack(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var flux []*unstructured.Unstructured
		for _, s := range stages {
			flux = append(flux, s.Objects...)
		}
		if a, f := identities(argo), identities(flux); a != f {
			t.Errorf("examples/flux and examples/kustomize render different objects:\nkustomize: %s\nflux:      %s", a, f)
		}
	}

	applied := map[string]bool{}
	for _, s := range stages {
		for _, dep := range s.DependsOn {
			if !applied[dep] {
				t.Fatalf("Kustomization %s applied before its dependency %s", s.Name, dep)
			}
		}
		if !s.Wait {
			t.Errorf("Kustomization %s: spec.wait is not true; the next stage would not wait for it", s.Name)
		}
		if len(s.Objects) == 0 {
			t.Logf("Kustomization %s: creates the Kustomizations %v", s.Name, s.Children)
			applied[s.Name] = true
			continue
		}
		cs, err := a.Apply(ctx, s.Name, s.Objects)
		if err != nil {
			t.Fatalf("Kustomization %s (%s): %v", s.Name, s.Path, err)
		}
		t.Logf("Kustomization %s (dependsOn %v): %d objects applied and ready", s.Name, s.DependsOn, len(cs.Entries))
		applied[s.Name] = true
	}
}

// identities lists objects as sorted "Kind/namespace/name".
func identities(objs []*unstructured.Unstructured) string {
	ids := make([]string, 0, len(objs))
	for _, o := range objs {
		ids = append(ids, o.GetKind()+"/"+o.GetNamespace()+"/"+o.GetName())
	}
	sort.Strings(ids)
	return strings.Join(ids, " ")
}
