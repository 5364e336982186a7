package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/fluxcd/pkg/ssa/utils"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gpupolicy/gpupolicy/e2e/internal/stack"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// TestArgoSyncWaves applies the rendered stack wave by wave (Flux's SSA engine, strict field
// validation, kstatus wait per wave, no API warning tolerated) and checks that the waves put
// the stages in gate order.
func TestArgoSyncWaves(t *testing.T) {
	d := deployed(t)
	for i, w := range d.waves {
		t.Logf("wave %d: %d objects: %s", w.Number, len(w.Objects), strings.Join(d.applied[i], ", "))
	}
	a, err := stack.NewApplier(env.cfg, "e2e-check")
	if err != nil {
		t.Fatal(err)
	}
	// Every rendered object exists as applied: the server kept what was sent (no field the
	// server dropped, no object skipped).
	for _, o := range d.objects {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(o.GroupVersionKind())
		if err := a.Client().Get(context.Background(), client.ObjectKeyFromObject(o), got); err != nil {
			t.Errorf("%s: %v", utils.FmtUnstructured(o), err)
		}
	}

	waveOf := map[string]int{} // gate label -> lowest wave of a DaemonSet it gates
	for _, w := range d.waves {
		for _, o := range w.Objects {
			if o.GetKind() != "DaemonSet" {
				continue
			}
			for g, dss := range d.stageDaemonSets {
				for _, ds := range dss {
					if ds.Name == o.GetName() {
						if cur, ok := waveOf[g]; !ok || w.Number < cur {
							waveOf[g] = w.Number
						}
					}
				}
			}
		}
	}
	order := []string{config.LabelDeployDriver, config.LabelDeployToolkit, config.LabelDeployDevicePlugin}
	for i := 1; i < len(order); i++ {
		prev, okPrev := waveOf[order[i-1]]
		cur, okCur := waveOf[order[i]]
		if !okPrev || !okCur {
			t.Fatalf("no DaemonSet gated by %s or %s in the rendered stack (gated: %v)", order[i-1], order[i], waveOf)
		}
		if prev >= cur {
			t.Errorf("%s DaemonSets are in wave %d, not after the %s ones (wave %d)", order[i], cur, order[i-1], prev)
		}
	}
	// Everything the stages need (namespace, RBAC, config, RuntimeClass, guardrails) comes in
	// a wave before the first stage.
	first := d.waves[0].Number
	for _, w := range d.waves {
		for _, o := range w.Objects {
			switch o.GetKind() {
			case "Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "RuntimeClass",
				"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding":
				if w.Number >= waveOf[config.LabelDeployDriver] && w.Number != first {
					t.Errorf("%s is in wave %d, not before the driver stage (wave %d)", utils.FmtUnstructured(o), w.Number, waveOf[config.LabelDeployDriver])
				}
			}
		}
	}
}

// TestDevicePluginPerPool: every node pool of the policy gets its own device-plugin DaemonSet,
// and the nodes outside every pool get one too; their node selections are disjoint.
func TestDevicePluginPerPool(t *testing.T) {
	d := deployed(t)
	pools := d.fleet.Config().NodePools
	dss := d.stageDaemonSets[config.LabelDeployDevicePlugin]
	if len(pools) == 0 {
		t.Fatal("the example policy defines no node pools; the suite needs at least one")
	}
	if len(dss) != len(pools)+1 {
		var names []string
		for _, ds := range dss {
			names = append(names, ds.Name)
		}
		t.Fatalf("device-plugin DaemonSets %v: want one per pool (%d) plus one for nodes outside the pools", names, len(pools))
	}
	for _, p := range pools {
		n := 0
		for _, ds := range dss {
			if selects(ds, p.NodeSelector) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("pool %s (%v): %d device-plugin DaemonSets select it, want 1", p.Name, p.NodeSelector, n)
		}
	}
}

// TestApplierRefusesWarningsAndUnknownFields keeps the "accepted" in TestArgoSyncWaves honest:
// the applier fails on an API warning and on a field the schema does not know, instead of
// passing with the field dropped.
func TestApplierRefusesWarningsAndUnknownFields(t *testing.T) {
	a, err := stack.NewApplier(env.cfg, "e2e-check")
	if err != nil {
		t.Fatal(err)
	}
	ns := workloadNamespace(t)
	cm := func(name string, extra map[string]any) *unstructured.Unstructured {
		o := map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": name, "namespace": ns}, "data": map[string]any{"k": "v"}}
		for k, v := range extra {
			o[k] = v
		}
		return &unstructured.Unstructured{Object: o}
	}
	ctx := context.Background()
	if _, err := a.Apply(ctx, "clean", []*unstructured.Unstructured{cm("clean", nil)}); err != nil {
		t.Fatalf("clean object refused: %v", err)
	}
	_, err = a.Apply(ctx, "unknown field", []*unstructured.Unstructured{cm("unknown", map[string]any{"spec": map[string]any{"x": "y"}})})
	if err == nil || !strings.Contains(err.Error(), "spec") {
		t.Errorf("unknown field: err = %v, want a strict-validation error naming it", err)
	}
	// A pod template with a fractional memory limit is accepted with a warning.
	warned := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "DaemonSet",
		"metadata": map[string]any{"name": "warned", "namespace": ns},
		"spec": map[string]any{
			"selector": map[string]any{"matchLabels": map[string]any{"app": "warned"}},
			"template": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{"app": "warned"}},
				"spec": map[string]any{
					"nodeSelector": map[string]any{"e2e/no-such-node": "true"},
					"containers": []any{map[string]any{"name": "c", "image": "busybox",
						"resources": map[string]any{"limits": map[string]any{"memory": "100.5"}}}},
				},
			},
		},
	}}
	_, err = a.Apply(ctx, "warning", []*unstructured.Unstructured{warned})
	if err == nil || !strings.Contains(err.Error(), "fractional byte value") {
		t.Errorf("warning: err = %v, want the applier to fail on it", err)
	}
}
