package render

import (
	"path"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
)

const fluxAPIVersion = "kustomize.toolkit.fluxcd.io/v1"

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
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetAPIVersion(fluxAPIVersion)
	u.SetKind("Kustomization")
	u.SetName(fluxName(p, s))
	u.SetNamespace(opts.FluxNamespace)
	u.SetLabels(map[string]string{LabelPartOf: PartOf, LabelManagedBy: ManagedBy, LabelInstance: p.Metadata.Name})
	return Object{Stage: s, Component: "flux", Obj: u}
}
