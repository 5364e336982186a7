package render

import (
	"path"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

const fluxAPIVersion = "kustomize.toolkit.fluxcd.io/v1"

// onDeleteHealth replaces kstatus' DaemonSet rule for a stage with an OnDelete DaemonSet (the
// stage table's OnDelete: the driver), a kustomize-controller v1.9 CEL health check. The driver
// DaemonSet is OnDelete: after a driver
// bump its old pods stay until a person (or the upgrade) replaces them, and kstatus counts
// updatedNumberScheduled < desiredNumberScheduled as in progress, so the stage, and every stage
// after it, would hang until its timeout, while Argo CD calls the same DaemonSet healthy. Here
// the stage is current once the controller observed this generation and every scheduled pod is
// Ready; which node still runs the old driver is node-level truth, in the driver-version and
// drift labels and the GPUStackReady condition. (The evaluator itself reports in progress while
// status.observedGeneration differs from metadata.generation; the has() covers a DaemonSet the
// controller has not seen yet, whose zero counts would otherwise read as done.)
var onDeleteHealth = map[string]any{
	"apiVersion": "apps/v1",
	"kind":       "DaemonSet",
	"inProgress": "!has(status.observedGeneration) || status.numberReady < status.desiredNumberScheduled",
	"current":    "has(status.observedGeneration) && status.numberReady == status.desiredNumberScheduled",
}

// fluxKustomization applies one stage directory. wait: true makes Flux report it ready only
// when its DaemonSets rolled out, so the next stage (dependsOn) starts after this one.
func fluxKustomization(p *v1alpha1.GPUPolicy, s Stage, dependsOn string, opts FileOptions) Object {
	spec := map[string]any{
		"interval":      "10m",
		"retryInterval": "1m",
		"timeout":       "10m",
		"path":          "./" + strings.TrimPrefix(path.Join(opts.FluxPath, s.Dir()), "/"),
		"prune":         true,
		"wait":          true,
		"sourceRef":     map[string]any{"kind": opts.FluxSourceKind, "name": opts.FluxSourceName},
	}
	if dependsOn != "" {
		spec["dependsOn"] = []any{map[string]any{"name": dependsOn}}
	}
	if config.OnDeleteRollout(string(s)) {
		spec["healthCheckExprs"] = []any{onDeleteHealth}
	}
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetAPIVersion(fluxAPIVersion)
	u.SetKind("Kustomization")
	u.SetName(fluxName(p, s))
	u.SetNamespace(opts.FluxNamespace)
	u.SetLabels(map[string]string{LabelPartOf: PartOf, LabelManagedBy: ManagedBy, LabelInstance: p.Metadata.Name})
	return Object{Stage: s, Component: "flux", Obj: u}
}
