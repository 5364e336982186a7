package render

import (
	"fmt"
	"path"
	"strings"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
)

// FileOptions shape the `render -o DIR` tree.
type FileOptions struct {
	// FluxPath is the tree's path inside the Git repository Flux reads ("./clusters/prod/gpu");
	// each stage Kustomization points at FluxPath/<stage dir>. Required for gitops=flux.
	FluxPath string
	// FluxSource is the source the Kustomizations read ("GitRepository/flux-system").
	FluxSourceKind, FluxSourceName string
	// FluxNamespace holds the Kustomization objects (Flux's own namespace, "flux-system").
	FluxNamespace string
}

// DefaultFileOptions are Flux's bootstrap conventions.
func DefaultFileOptions() FileOptions {
	return FileOptions{FluxSourceKind: "GitRepository", FluxSourceName: "flux-system", FluxNamespace: "flux-system"}
}

const kustomizationFile = "kustomization.yaml"

// FluxDir holds the Flux Kustomization objects of the flux layout.
const FluxDir = "flux"

// Files lays objs out as a tree (relative path → content): one file per object named
// <stage dir>/<kind>-<name>.yaml. For argocd and none a root kustomization.yaml lists every
// file in apply order (Argo CD applies it as one kustomize application and orders it by the
// sync waves). For flux each stage directory gets its own kustomization.yaml and FluxDir gets
// one Flux Kustomization per stage, each depending on the previous one and waiting for its
// objects to be ready.
func Files(p *v1alpha1.GPUPolicy, objs Objects, opts FileOptions) (map[string][]byte, error) {
	files := map[string][]byte{}
	perStage := map[Stage][]string{}
	var all []string
	for _, o := range objs {
		name := o.Path()
		if _, dup := files[name]; dup {
			return nil, fmt.Errorf("two objects map to the file %s: rename one", name)
		}
		y, err := o.YAML()
		if err != nil {
			return nil, err
		}
		files[name] = y
		perStage[o.Stage] = append(perStage[o.Stage], fileName(o))
		all = append(all, name)
	}
	if p.Spec.GitOps != v1alpha1.GitOpsFlux {
		files[kustomizationFile] = kustomization(all)
		return files, nil
	}
	if opts.FluxPath == "" {
		return nil, fmt.Errorf("gitops: flux needs the tree's path in the Git repository for the Kustomizations' spec.path (--flux-path)")
	}
	var fluxFiles []string
	prev := ""
	for _, s := range Stages {
		if len(perStage[s]) == 0 {
			continue
		}
		files[path.Join(s.Dir(), kustomizationFile)] = kustomization(perStage[s])
		ks, err := fluxKustomization(p, s, prev, opts).YAML()
		if err != nil {
			return nil, err
		}
		name := fmt.Sprintf("%s.yaml", fluxName(p, s))
		files[path.Join(FluxDir, name)] = ks
		fluxFiles = append(fluxFiles, name)
		prev = fluxName(p, s)
	}
	files[path.Join(FluxDir, kustomizationFile)] = kustomization(fluxFiles)
	return files, nil
}

// Path is the object's file in the rendered tree: "<stage dir>/<kind>-<name>.yaml". The KRM
// function puts it in the internal.config.kubernetes.io/path annotation, so kpt writes the
// same tree as `render -o`.
func (o Object) Path() string { return path.Join(o.Stage.Dir(), fileName(o)) }

// fileName is "<kind>-<name>.yaml"; ':' (cluster role names) is not portable in file names.
func fileName(o Object) string {
	kind := strings.ToLower(o.Obj.GetObjectKind().GroupVersionKind().Kind)
	return kind + "-" + strings.ReplaceAll(o.Obj.GetName(), ":", "-") + ".yaml"
}

// kustomization is a kustomize.config.k8s.io Kustomization listing resources in order.
func kustomization(resources []string) []byte {
	var b strings.Builder
	b.WriteString("# Rendered by gpupolicy-fn; do not edit: change the GPUPolicy and render again.\n")
	b.WriteString("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n")
	for _, r := range resources {
		fmt.Fprintf(&b, "- %s\n", r)
	}
	return []byte(b.String())
}

func fluxName(p *v1alpha1.GPUPolicy, s Stage) string { return p.Metadata.Name + "-" + string(s) }
