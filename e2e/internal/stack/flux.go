package stack

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/fluxcd/pkg/ssa/utils"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// FluxStage is one Flux Kustomization of a layout: the directory it applies and the stages it
// waits for.
type FluxStage struct {
	Name      string
	Path      string // absolute directory
	DependsOn []string
	Wait      bool
	Objects   []*unstructured.Unstructured
	// Children are the Flux Kustomizations this stage's directory defines (a root
	// Kustomization that applies the per-stage ones); they are ordered after this stage.
	Children []string
}

const fluxKustomizationGroup = "kustomize.toolkit.fluxcd.io"

// LoadFluxLayout finds the Flux Kustomization objects under dir, loads each one's path and
// returns the stages in an order that respects dependsOn (ties by name, so the order is stable).
// A spec.path is resolved like Flux does, against the root of the Git repository (repoRoot);
// a path that does not exist there is an error naming the Kustomization.
//
// The Kustomization CRD is not installed in the test cluster: the suite plays
// kustomize-controller itself, so the objects are parsed, not applied.
func LoadFluxLayout(ctx context.Context, kustomize, repoRoot, dir string) ([]FluxStage, error) {
	ks, err := findFluxKustomizations(dir)
	if err != nil {
		return nil, err
	}
	if len(ks) == 0 {
		return nil, fmt.Errorf("no %s Kustomization objects under %s", fluxKustomizationGroup, dir)
	}
	byName := map[string]*FluxStage{}
	for _, k := range ks {
		s := &FluxStage{Name: k.GetName()}
		p, _, _ := unstructured.NestedString(k.Object, "spec", "path")
		if p == "" {
			return nil, fmt.Errorf("flux Kustomization %s: spec.path is empty", s.Name)
		}
		s.Path = filepath.Join(repoRoot, filepath.FromSlash(strings.TrimPrefix(p, "./")))
		if fi, err := os.Stat(s.Path); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("flux Kustomization %s: spec.path %q is not a directory under the repository root %s", s.Name, p, repoRoot)
		}
		s.Wait, _, _ = unstructured.NestedBool(k.Object, "spec", "wait")
		deps, _, _ := unstructured.NestedSlice(k.Object, "spec", "dependsOn")
		for _, d := range deps {
			if m, ok := d.(map[string]any); ok {
				if n, ok := m["name"].(string); ok {
					s.DependsOn = append(s.DependsOn, n)
				}
			}
		}
		if _, dup := byName[s.Name]; dup {
			return nil, fmt.Errorf("two Kustomization objects named %s under %s", s.Name, dir)
		}
		byName[s.Name] = s
	}
	// Load every path first: a directory that defines Kustomizations makes its own stage the
	// parent of those, which the order must respect like a dependsOn.
	parents := map[string][]string{}
	for _, s := range byName {
		if s.Objects, s.Children, err = loadFluxPath(ctx, kustomize, s.Path); err != nil {
			return nil, fmt.Errorf("flux Kustomization %s: %w", s.Name, err)
		}
		for _, c := range s.Children {
			parents[c] = append(parents[c], s.Name)
		}
	}
	order, err := dependsOnOrder(byName, parents)
	if err != nil {
		return nil, err
	}
	stages := make([]FluxStage, 0, len(order))
	for _, s := range order {
		stages = append(stages, *s)
	}
	return stages, nil
}

func findFluxKustomizations(dir string) ([]*unstructured.Unstructured, error) {
	objs, err := readYAMLTree(dir)
	if err != nil {
		return nil, err
	}
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GroupVersionKind().Group == fluxKustomizationGroup && o.GetKind() == "Kustomization" {
			out = append(out, o)
		}
	}
	return out, nil
}

// readYAMLTree reads every object of every *.yaml/*.yml file under dir, in walk order.
func readYAMLTree(dir string) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !isYAML(path) {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		o, err := utils.ReadObjects(f)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		objs = append(objs, o...)
		return nil
	})
	return objs, err
}

// dependsOnOrder is a topological sort (Kahn) over dependsOn and the parent relation that
// picks the smallest ready name first.
func dependsOnOrder(byName map[string]*FluxStage, parents map[string][]string) ([]*FluxStage, error) {
	indeg := map[string]int{}
	next := map[string][]string{}
	for name, s := range byName {
		indeg[name] += 0
		for _, d := range append(append([]string(nil), s.DependsOn...), parents[name]...) {
			if _, ok := byName[d]; !ok {
				return nil, fmt.Errorf("flux Kustomization %s depends on %s, which the layout does not define", name, d)
			}
			indeg[name]++
			next[d] = append(next[d], name)
		}
	}
	var ready []string
	for n, d := range indeg {
		if d == 0 {
			ready = append(ready, n)
		}
	}
	var order []*FluxStage
	for len(ready) > 0 {
		sort.Strings(ready)
		n := ready[0]
		ready = ready[1:]
		order = append(order, byName[n])
		for _, m := range next[n] {
			if indeg[m]--; indeg[m] == 0 {
				ready = append(ready, m)
			}
		}
	}
	if len(order) != len(byName) {
		var stuck []string
		for n, d := range indeg {
			if d > 0 {
				stuck = append(stuck, n)
			}
		}
		sort.Strings(stuck)
		return nil, fmt.Errorf("dependsOn cycle among Kustomizations %v", stuck)
	}
	return order, nil
}

// loadFluxPath reads a stage directory as kustomize-controller does: kustomize build when it
// has a kustomization.yaml, else every YAML file below it (the controller generates a
// kustomization listing them). Flux Kustomizations among the objects are returned by name as
// children: the suite plays the controller rather than applying them (no Flux CRDs).
func loadFluxPath(ctx context.Context, kustomize, dir string) (objs []*unstructured.Unstructured, children []string, err error) {
	all, err := readFluxPath(ctx, kustomize, dir)
	if err != nil {
		return nil, nil, err
	}
	for _, o := range all {
		if o.GroupVersionKind().Group == fluxKustomizationGroup {
			children = append(children, o.GetName())
		} else {
			objs = append(objs, o)
		}
	}
	if len(objs) == 0 && len(children) == 0 {
		return nil, nil, fmt.Errorf("no objects in %s", dir)
	}
	return objs, children, nil
}

func readFluxPath(ctx context.Context, kustomize, dir string) ([]*unstructured.Unstructured, error) {
	for _, k := range []string{"kustomization.yaml", "kustomization.yml", "Kustomization"} {
		if _, err := os.Stat(filepath.Join(dir, k)); err == nil {
			return Kustomize(ctx, kustomize, dir)
		}
	}
	objs, err := readYAMLTree(dir)
	if err != nil {
		return nil, err
	}
	if len(objs) == 0 {
		return nil, fmt.Errorf("no objects in %s", dir)
	}
	return objs, nil
}

func isYAML(path string) bool {
	ext := filepath.Ext(path)
	return ext == ".yaml" || ext == ".yml"
}
