package overlay

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// Kustomization is the part of a kustomization file a GPUPolicy overlay uses.
type Kustomization struct {
	Dir, File string

	Resources             []string `yaml:"resources"`
	Generators            []string `yaml:"generators"`
	Patches               []Patch  `yaml:"patches"`
	PatchesStrategicMerge []string `yaml:"patchesStrategicMerge"`
	PatchesJSON6902       []Patch  `yaml:"patchesJson6902"`
}

// Patch is an entry of patches (or patchesJson6902): a file or an inline patch, and the objects
// it applies to.
type Patch struct {
	Path    string          `yaml:"path"`
	Patch   string          `yaml:"patch"`
	Target  *Target         `yaml:"target"`
	Options map[string]bool `yaml:"options"`
}

// Target selects objects as kustomize's patch target does: group, version and kind exactly,
// name and namespace as anchored regular expressions, an empty field matching anything.
type Target struct {
	Group              string `yaml:"group"`
	Version            string `yaml:"version"`
	Kind               string `yaml:"kind"`
	Name               string `yaml:"name"`
	Namespace          string `yaml:"namespace"`
	LabelSelector      string `yaml:"labelSelector"`
	AnnotationSelector string `yaml:"annotationSelector"`
}

// readFields are the kustomization fields overlay reads; the kind and metadata only identify
// the file. Every other field changes the objects in a way overlay does not reproduce
// (a name prefix, common labels, replacements, components ...), so it is refused.
var readFields = []string{"apiVersion", "kind", "metadata", "resources", "generators", "patches", "patchesStrategicMerge", "patchesJson6902", "sortOptions"}

func readKustomization(dir string, c *Cache) (*Kustomization, error) {
	var file string
	for _, name := range KustomizationFiles {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			file = filepath.Join(dir, name)
			break
		}
	}
	if file == "" {
		return nil, fmt.Errorf("%s: no kustomization.yaml: a cluster (and every directory it lists) is a kustomization", dir)
	}
	docs, err := c.docs(file)
	if err != nil {
		return nil, err
	}
	k := &Kustomization{Dir: dir, File: file}
	if len(docs) == 0 {
		return k, nil
	}
	if len(docs) > 1 || docs[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s: a kustomization is one mapping", file)
	}
	for i := 0; i+1 < len(docs[0].Content); i += 2 {
		key := docs[0].Content[i].Value
		if !slices.Contains(readFields, key) {
			return nil, fmt.Errorf("%s:%d: %s is not read by fleet render, which reads %s: kustomize would change the objects with it, so the fleet's output would differ from kustomize build; drop it, or build this cluster with kustomize",
				file, docs[0].Content[i].Line, key, strings.Join(readFields[3:8], ", "))
		}
	}
	if err := docs[0].Decode(k); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	for i, p := range append(slices.Clone(k.Patches), k.PatchesJSON6902...) {
		if err := p.check(); err != nil {
			return nil, fmt.Errorf("%s: patch %d: %w", file, i+1, err)
		}
	}
	return k, nil
}

func (k *Kustomization) hasPatches() bool {
	return len(k.Patches)+len(k.PatchesStrategicMerge)+len(k.PatchesJSON6902) > 0
}

func (p Patch) check() error {
	switch {
	case (p.Path == "") == (p.Patch == ""):
		return fmt.Errorf("give exactly one of path and patch")
	case len(p.Options) > 0:
		return fmt.Errorf("options are not read by fleet render (a patch may not rename or re-kind the GPUPolicy): drop them")
	case p.Target != nil && (p.Target.LabelSelector != "" || p.Target.AnnotationSelector != ""):
		return fmt.Errorf("target.labelSelector and target.annotationSelector are not read by fleet render: select the GPUPolicy by kind and name")
	}
	return nil
}

// applyPatches applies the level's patches to res in kustomize's order: patchesStrategicMerge,
// patches, patchesJson6902.
func (k *Kustomization) applyPatches(res []Resource, c *Cache) error {
	for i, entry := range k.PatchesStrategicMerge {
		p := Patch{Patch: entry}
		if !strings.Contains(entry, "\n") {
			if _, err := os.Stat(filepath.Join(k.Dir, entry)); err == nil {
				p = Patch{Path: entry}
			}
		}
		if err := k.apply(res, p, fmt.Sprintf("patchesStrategicMerge %d", i+1), c); err != nil {
			return err
		}
	}
	for i, p := range k.Patches {
		if err := k.apply(res, p, fmt.Sprintf("patches %d", i+1), c); err != nil {
			return err
		}
	}
	for i, p := range k.PatchesJSON6902 {
		if p.Target == nil {
			return fmt.Errorf("%s: patchesJson6902 %d has no target: a JSON 6902 patch needs one", k.File, i+1)
		}
		if err := k.apply(res, p, fmt.Sprintf("patchesJson6902 %d", i+1), c); err != nil {
			return err
		}
	}
	return nil
}

// apply applies one patch entry: a sequence of operations is a JSON 6902 patch, any mapping a
// strategic-merge patch (kustomize tells them apart the same way).
func (k *Kustomization) apply(res []Resource, p Patch, where string, c *Cache) error {
	where = k.File + ": " + where
	var docs []*yaml.Node
	var err error
	if p.Path != "" {
		where += " (" + p.Path + ")"
		docs, err = c.docs(filepath.Join(k.Dir, filepath.FromSlash(p.Path)))
	} else {
		docs, err = parseDocs(where, []byte(p.Patch))
	}
	if err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	if len(docs) == 0 {
		return fmt.Errorf("%s: the patch is empty", where)
	}
	if docs[0].Kind == yaml.SequenceNode {
		if p.Target == nil {
			return fmt.Errorf("%s: a JSON 6902 patch (a list of operations) needs a target", where)
		}
		ops, err := decodeOps(docs[0])
		if err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		return forTargets(res, p.Target, where, func(r Resource) error { return applyOps(r.Node, ops) })
	}
	for _, d := range docs {
		if d.Kind != yaml.MappingNode {
			return fmt.Errorf("%s: a strategic-merge patch is a mapping (an object)", where)
		}
		patch := Resource{Node: d}
		if p.Target != nil {
			// The target chooses the objects; the patch may not rename them.
			err = forTargets(res, p.Target, where, func(r Resource) error {
				pc := deepCopy(d)
				for _, f := range []string{"apiVersion", "kind"} {
					setScalar(pc, f, r.str(f))
				}
				if md := lookup(pc, "metadata"); md != nil && md.Kind == yaml.MappingNode {
					setScalar(md, "name", r.Name())
				}
				return mergePatch(r.Node, pc)
			})
		} else {
			err = mergeInto(res, patch, where)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// mergeInto applies a strategic-merge patch to the object of the same kind and name; there
// must be one, as kustomize requires.
func mergeInto(res []Resource, patch Resource, where string) error {
	for _, r := range res {
		if r.Kind() == patch.Kind() && r.Name() == patch.Name() && r.Namespace() == patch.Namespace() && group(r.APIVersion()) == group(patch.APIVersion()) {
			if err := mergePatch(r.Node, patch.Node); err != nil {
				return fmt.Errorf("%s: %w", where, err)
			}
			return nil
		}
	}
	return fmt.Errorf("%s: no object matches the patch's %s: the patch's apiVersion, kind and metadata.name must name an object of the build (or give the patch a target)", where, patch.id())
}

func group(apiVersion string) string {
	g, _, ok := strings.Cut(apiVersion, "/")
	if !ok {
		return ""
	}
	return g
}

func forTargets(res []Resource, t *Target, where string, fn func(Resource) error) error {
	name, err := anchored(t.Name)
	if err != nil {
		return fmt.Errorf("%s: target.name: %w", where, err)
	}
	ns, err := anchored(t.Namespace)
	if err != nil {
		return fmt.Errorf("%s: target.namespace: %w", where, err)
	}
	for _, r := range res {
		g, v := group(r.APIVersion()), r.APIVersion()
		if i := strings.IndexByte(v, '/'); i >= 0 {
			v = v[i+1:]
		}
		if (t.Group != "" && t.Group != g) || (t.Version != "" && t.Version != v) || (t.Kind != "" && t.Kind != r.Kind()) ||
			!name.MatchString(r.Name()) || !ns.MatchString(r.Namespace()) {
			continue
		}
		if err := fn(r); err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
	}
	return nil
}

func anchored(expr string) (*regexp.Regexp, error) {
	if expr == "" {
		return regexp.MustCompile(""), nil
	}
	return regexp.Compile("^(?:" + expr + ")$")
}

func setScalar(m *yaml.Node, key, value string) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content[i+1] = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: value}
			return
		}
	}
}
