package e2e

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/gpupolicy/gpupolicy/e2e/internal/cluster"
	"github.com/gpupolicy/gpupolicy/e2e/internal/stack"
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
	c, err := cluster.Start(ctx, env.bins, filepath.Join(env.workDir, "flux-cluster"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	if err := installMonitoringCRDs(ctx, c.RESTConfig()); err != nil {
		t.Fatal(err)
	}
	a, err := stack.NewApplier(c.RESTConfig(), "kustomize-controller")
	if err != nil {
		t.Fatal(err)
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
		cs, err := a.Apply(ctx, s.Name, s.Objects)
		if err != nil {
			t.Fatalf("Kustomization %s (%s): %v", s.Name, s.Path, err)
		}
		t.Logf("Kustomization %s (dependsOn %v): %d objects applied and ready", s.Name, s.DependsOn, len(cs.Entries))
		applied[s.Name] = true
	}
}
