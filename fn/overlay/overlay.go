// Package overlay builds a cluster's GPUPolicy from a kustomize overlay the way `kustomize build`
// would, without kustomize: `gpupolicy-fn fleet render` reads many clusters' overlays in one
// process, and gpupolicy-fn links no kustomize (fn/deps_test.go). It reads the part of a
// kustomization that makes a GPUPolicy (resources, generators, and the three patch fields with
// kustomize's semantics for a custom resource: strategic-merge patches merge maps, delete on
// null and replace lists whole; JSON 6902 patches as RFC 6902) and refuses every other field
// with the reason, instead of building something kustomize would not. The tests hold it to real
// kustomize on the same overlays.
package overlay

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	yaml "go.yaml.in/yaml/v3"
)

// KustomizationFiles are the names kustomize looks for in a directory, in its order.
var KustomizationFiles = []string{"kustomization.yaml", "kustomization.yml", "Kustomization"}

// Cache holds parsed files by absolute path, so the base every cluster shares is read and
// parsed once per process; every use gets its own copy. Safe for concurrent use.
type Cache struct {
	mu    sync.Mutex
	files map[string]cached
}

type cached struct {
	docs []*yaml.Node
	err  error
}

// NewCache returns an empty cache.
func NewCache() *Cache { return &Cache{files: map[string]cached{}} }

// docs returns copies of the YAML documents of file (empty documents left out).
func (c *Cache) docs(file string) ([]*yaml.Node, error) {
	c.mu.Lock()
	e, ok := c.files[file]
	c.mu.Unlock()
	if !ok {
		e.docs, e.err = parseFile(file)
		c.mu.Lock()
		c.files[file] = e
		c.mu.Unlock()
	}
	if e.err != nil {
		return nil, e.err
	}
	out := make([]*yaml.Node, len(e.docs))
	for i, d := range e.docs {
		out[i] = deepCopy(d)
	}
	return out, nil
}

// maxFileBytes bounds one file of an overlay, as the policy itself is bounded.
const maxFileBytes = 4 << 20

func parseFile(file string) ([]*yaml.Node, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	if len(data) > maxFileBytes {
		return nil, fmt.Errorf("%s: %d bytes, over the %d MiB an overlay file may have", file, len(data), maxFileBytes>>20)
	}
	return parseDocs(file, data)
}

func parseDocs(name string, data []byte) ([]*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []*yaml.Node
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if len(doc.Content) == 0 || isNull(doc.Content[0]) {
			continue
		}
		docs = append(docs, doc.Content[0])
	}
}

// Resource is one object of a build, with the file it came from for messages.
type Resource struct {
	Node *yaml.Node // a mapping
	File string
}

func (r Resource) str(path ...string) string {
	n := lookup(r.Node, path...)
	if n == nil || n.Kind != yaml.ScalarNode {
		return ""
	}
	return n.Value
}

// Kind, Name, Namespace and APIVersion are the object's identity as kustomize keys it.
func (r Resource) Kind() string       { return r.str("kind") }
func (r Resource) Name() string       { return r.str("metadata", "name") }
func (r Resource) Namespace() string  { return r.str("metadata", "namespace") }
func (r Resource) APIVersion() string { return r.str("apiVersion") }

func (r Resource) id() string {
	id := r.APIVersion() + " " + r.Kind() + " " + r.Name()
	if ns := r.Namespace(); ns != "" {
		id += " in namespace " + ns
	}
	return id
}

// PolicyKind is the kind a cluster's overlay must produce exactly one of.
const PolicyKind = "GPUPolicy"

// Policy builds dir (a kustomization) and returns its one GPUPolicy as YAML, the document
// `kustomize build` of the policy's own overlay prints, in the form gpupolicy-fn render reads.
// Every object the build makes must be a GPUPolicy: the fleet renders the policy, nothing
// else, and silently leaving an object out would make the fleet's output differ from
// kustomize's.
func Policy(dir string, c *Cache) ([]byte, error) {
	res, err := Build(dir, c)
	if err != nil {
		return nil, err
	}
	var policies []Resource
	for _, r := range res {
		if r.Kind() != PolicyKind {
			return nil, fmt.Errorf("%s: the build has %s (from %s), which is not a GPUPolicy: fleet render writes only what the cluster's GPUPolicy renders; keep other objects in a kustomization of their own", dir, r.id(), r.File)
		}
		policies = append(policies, r)
	}
	switch len(policies) {
	case 0:
		return nil, fmt.Errorf("%s: the build has no GPUPolicy: list the policy (or the overlay that patches it) under resources or generators", dir)
	case 1:
	default:
		var ids []string
		for _, p := range policies {
			ids = append(ids, p.Name()+" ("+p.File+")")
		}
		return nil, fmt.Errorf("%s: the build has %d GPUPolicies, %s: a cluster has one GPUPolicy; patch the base's instead of adding another", dir, len(policies), strings.Join(ids, ", "))
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(policies[0].Node); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Build returns the objects `kustomize build dir` makes, for the fields Kustomization reads:
// resources and generators (files and kustomization directories, recursively), then the
// patches of each level over what that level holds.
func Build(dir string, c *Cache) ([]Resource, error) {
	return build(dir, c, nil)
}

func build(dir string, c *Cache, visiting []string) ([]Resource, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if slices.Contains(visiting, abs) {
		return nil, fmt.Errorf("%s: kustomization cycle: %s", dir, strings.Join(append(visiting, abs), " -> "))
	}
	visiting = append(visiting, abs)
	k, err := readKustomization(abs, c)
	if err != nil {
		return nil, err
	}
	var out []Resource
	for _, field := range []struct {
		name    string
		entries []string
	}{{"resources", k.Resources}, {"generators", k.Generators}} {
		for _, entry := range field.entries {
			res, err := loadEntry(k, field.name, entry, c, visiting)
			if err != nil {
				return nil, err
			}
			for _, r := range res {
				if i := slices.IndexFunc(out, func(o Resource) bool { return o.id() == r.id() }); i >= 0 {
					return nil, fmt.Errorf("%s: %s %q adds %s a second time (first from %s): kustomize refuses the same object twice; list it once", k.File, field.name, entry, r.id(), out[i].File)
				}
				out = append(out, r)
			}
		}
	}
	if len(k.Generators) > 0 && k.hasPatches() {
		return nil, fmt.Errorf("%s: has generators and patches: kustomize applies these patches to what the generator makes (the rendered objects), which fleet render does not rewrite; patch the GPUPolicy in the overlay the generator lists instead", k.File)
	}
	if err := k.applyPatches(out, c); err != nil {
		return nil, err
	}
	return out, nil
}

// loadEntry reads one entry of resources or generators: a file of objects or a directory
// holding a kustomization.
func loadEntry(k *Kustomization, field, entry string, c *Cache, visiting []string) ([]Resource, error) {
	if strings.Contains(entry, "://") || strings.HasPrefix(entry, "git@") || strings.HasPrefix(entry, "github.com/") {
		return nil, fmt.Errorf("%s: %s %q is remote: fleet render reads the repository's own files only; vendor the base into the repository", k.File, field, entry)
	}
	p := filepath.Join(k.Dir, filepath.FromSlash(entry))
	st, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("%s: %s %q: %w", k.File, field, entry, err)
	}
	if st.IsDir() {
		return build(p, c, visiting)
	}
	docs, err := c.docs(p)
	if err != nil {
		return nil, fmt.Errorf("%s: %s %q: %w", k.File, field, entry, err)
	}
	out := make([]Resource, 0, len(docs))
	for _, d := range docs {
		if d.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("%s: a document is not a mapping: each document of a resource file is one object", p)
		}
		r := Resource{Node: d, File: p}
		if r.Kind() == "" || r.Name() == "" {
			return nil, fmt.Errorf("%s: an object without kind or metadata.name: every object needs both", p)
		}
		out = append(out, r)
	}
	return out, nil
}

// deepCopy copies a node tree (aliases are copied as the nodes they point to).
func deepCopy(n *yaml.Node) *yaml.Node {
	if n == nil {
		return nil
	}
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		return deepCopy(n.Alias)
	}
	c := *n
	c.Content = make([]*yaml.Node, len(n.Content))
	for i, x := range n.Content {
		c.Content[i] = deepCopy(x)
	}
	return &c
}

// lookup follows mapping keys from n.
func lookup(n *yaml.Node, path ...string) *yaml.Node {
	for _, key := range path {
		if n == nil || n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				next = n.Content[i+1]
			}
		}
		n = next
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n == nil || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null")
}
