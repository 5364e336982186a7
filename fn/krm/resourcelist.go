package krm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	yaml "go.yaml.in/yaml/v3"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
)

// resourceList is a KRM ResourceList as yaml.v3 reads it: the nodes of its items and
// functionConfig as they came (comments, styles, key order) and the results an earlier
// function of a kpt pipeline left. The function reads the list with yaml.v3 directly rather
// than through the functions SDK: the SDK links kyaml, kube-openapi, gnostic and protobuf,
// whose package initialisation every call paid, and it wrote each item back to text only for
// the function to parse it again.
type resourceList struct {
	items          []*yaml.Node
	functionConfig *yaml.Node   // nil when absent, null or {}
	results        []*yaml.Node // from the input, passed on first

	out []*result // this function's results
}

// parseResourceList reads one YAML document holding a ResourceList. Its errors say what the
// input holds instead (Run prefixes them with "stdin is not a KRM ResourceList").
func parseResourceList(in []byte) (*resourceList, error) {
	dec := yaml.NewDecoder(bytes.NewReader(in))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("it holds no YAML document")
		}
		return nil, err
	}
	var second yaml.Node
	if err := dec.Decode(&second); !errors.Is(err, io.EOF) {
		return nil, errors.New("it holds more than one YAML document (---); a ResourceList is one document")
	}
	root := resolve(&doc)
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = resolve(root.Content[0])
	}
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("the document is %s, not a mapping with kind: ResourceList", kindName(root))
	}
	if k := valueAt(root, "kind"); k != "ResourceList" {
		return nil, fmt.Errorf("its kind is %q, not ResourceList", k)
	}
	rl := &resourceList{}
	if fc := lookup(root, "functionConfig"); fc != nil && !isNull(fc) {
		if fc.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("functionConfig is %s, not an object", kindName(fc))
		}
		if len(fc.Content) > 0 {
			rl.functionConfig = fc
		}
	}
	if items := lookup(root, "items"); items != nil && !isNull(items) {
		if items.Kind != yaml.SequenceNode {
			return nil, fmt.Errorf("items is %s, not a list of objects", kindName(items))
		}
		for i, it := range items.Content {
			it = resolve(it)
			if it.Kind != yaml.MappingNode {
				return nil, fmt.Errorf("items[%d] is %s, not an object", i, kindName(it))
			}
			rl.items = append(rl.items, it)
		}
	}
	// Results are a list in the spec; older kyaml wrote a mapping with the list under items.
	if res := lookup(root, "results"); res != nil && !isNull(res) {
		if res.Kind == yaml.MappingNode {
			res = lookup(res, "items")
		}
		if res != nil && res.Kind == yaml.SequenceNode {
			rl.results = res.Content
		}
	}
	return rl, nil
}

// resolve follows an alias to its anchored node.
func resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// lookup returns the value under key in mapping m (its first occurrence), or nil.
func lookup(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if k := resolve(m.Content[i]); k.Kind == yaml.ScalarNode && k.Value == key {
			return resolve(m.Content[i+1])
		}
	}
	return nil
}

// valueAt returns the scalar value under the dotted path in mapping m, or "".
func valueAt(m *yaml.Node, path string) string {
	n := m
	for key := range strings.SplitSeq(path, ".") {
		if n = lookup(n, key); n == nil {
			return ""
		}
	}
	if n.Kind != yaml.ScalarNode || isNull(n) {
		return ""
	}
	return n.Value
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// kindName is v1alpha1.KindName with a scalar's value: what stands where an object should.
func kindName(n *yaml.Node) string {
	if n.Kind != yaml.ScalarNode {
		return v1alpha1.KindName(n)
	}
	if isNull(n) {
		return "empty"
	}
	return fmt.Sprintf("the scalar %q", n.Value)
}

// object is a mapping node read as a Kubernetes object: its identity and annotations.
type object struct{ *yaml.Node }

func (o object) apiVersion() string { return valueAt(o.Node, "apiVersion") }
func (o object) kind() string       { return valueAt(o.Node, "kind") }
func (o object) name() string       { return valueAt(o.Node, "metadata.name") }
func (o object) namespace() string  { return valueAt(o.Node, "metadata.namespace") }

// group is the API group of apiVersion: "" for the core group ("v1").
func (o object) group() string {
	g, _, ok := strings.Cut(o.apiVersion(), "/")
	if !ok {
		return ""
	}
	return g
}

func (o object) annotation(key string) string {
	n := lookup(lookup(o.Node, "metadata"), "annotations")
	if v := lookup(n, key); v != nil && v.Kind == yaml.ScalarNode {
		return v.Value
	}
	return ""
}

// String is the object's identity for messages, as kpt writes it: kind/namespace/name.
func (o object) String() string {
	parts := []string{o.kind()}
	if ns := o.namespace(); ns != "" {
		parts = append(parts, ns)
	}
	return strings.Join(append(parts, o.name()), "/")
}

func (o object) ref() *resourceRef {
	return &resourceRef{APIVersion: o.apiVersion(), Kind: o.kind(), Name: o.name(), Namespace: o.namespace()}
}

// fromLine renumbers the lines of the tree under n so that n's first line is line 1: the
// policy's decode errors name lines of the policy, not of the ResourceList around it.
// Aliases are not followed: kustomize expands them before it calls a function.
func fromLine(n *yaml.Node) {
	by := n.Line - 1
	if by <= 0 {
		return
	}
	seen := map[*yaml.Node]bool{}
	var walk func(*yaml.Node)
	walk = func(n *yaml.Node) {
		if n == nil || seen[n] {
			return
		}
		seen[n] = true
		n.Line -= by
		for _, c := range n.Content {
			walk(c)
		}
	}
	walk(n)
}
