package render

import (
	"fmt"
	"maps"

	yaml "go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gpupolicy/gpupolicy/fn/internal/yamlout"
)

// Map is the object as JSON-compatible data without the noise typed structs carry
// (creationTimestamp: null, an all-zero status): what a person reviews and what is applied.
func (o Object) Map() (map[string]any, error) {
	m, err := yamlout.Map(o.Obj)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o, err)
	}
	return finish(m), nil
}

// finish makes an object's JSON data the written form: a rendered object has no status (the
// API server owns it) and no creationTimestamp: null.
func finish(m map[string]any) map[string]any {
	delete(m, "status")
	dropNullTimestamps(m)
	return m
}

// written is Map for the writers, which do not change it: the data the size check kept
// when render made the object, else built now.
func (o Object) written() (map[string]any, error) {
	if o.data != nil {
		return o.data, nil
	}
	return o.Map()
}

// Node is the object as a YAML node tree, for callers that edit or embed it. (The KRM
// function writes its objects with Objects.AppendItems, the same bytes without the tree.)
func (o Object) Node() (*yaml.Node, error) {
	m, err := o.Map()
	if err != nil {
		return nil, err
	}
	return yamlout.Node(m), nil
}

// dropNullTimestamps removes creationTimestamp: null from every metadata (object and pod
// template) so the output carries nothing a person did not decide.
func dropNullTimestamps(v any) {
	switch t := v.(type) {
	case map[string]any:
		if ts, ok := t["creationTimestamp"]; ok && ts == nil {
			delete(t, "creationTimestamp")
		}
		for _, x := range t {
			dropNullTimestamps(x)
		}
	case []any:
		for _, x := range t {
			dropNullTimestamps(x)
		}
	}
}

// YAML is one document with sorted keys.
func (o Object) YAML() ([]byte, error) {
	m, err := o.written()
	if err != nil {
		return nil, err
	}
	return yamlout.Document(m)
}

// Unstructured is the object as the dynamic client and kyaml see it.
func (o Object) Unstructured() (*unstructured.Unstructured, error) {
	m, err := o.Map()
	if err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// YAML is every object as one multi-document stream, in order.
func (objs Objects) YAML() ([]byte, error) {
	w := yamlout.NewWriter(yamlout.Documents, make([]byte, 0, 4096*len(objs)))
	for _, o := range objs {
		m, err := o.written()
		if err != nil {
			return nil, err
		}
		if err := w.Add(m); err != nil {
			return nil, err
		}
	}
	return w.Bytes(), nil
}

// AppendItems appends objs to dst as the items of a block sequence at column 0 ("- kind:
// ..."), each with the extra annotations annotate gives it (may be nil): the bytes yaml.v3
// writes for the node trees of Object.Node in a sequence at the top level with indent 2 and
// compact sequences, which is where the KRM function's ResourceList keeps its items.
func (objs Objects) AppendItems(dst []byte, annotate func(Object) map[string]string) ([]byte, error) {
	w := yamlout.NewWriter(yamlout.Items, dst)
	for _, o := range objs {
		m, err := o.written()
		if err != nil {
			return nil, err
		}
		if annotate != nil {
			if kv := annotate(o); len(kv) > 0 {
				if m, err = withAnnotations(m, kv); err != nil {
					return nil, fmt.Errorf("%s: %w", o, err)
				}
			}
		}
		if err := w.Add(m); err != nil {
			return nil, fmt.Errorf("%s: %w", o, err)
		}
	}
	return w.Bytes(), nil
}

// withAnnotations is m with annotations added to metadata.annotations; m itself is not
// changed (it may be the data render kept), only the maps on the way are copied. Where the
// object has none yet, the new mapping goes after metadata's other keys, not in key order
// (yamlout.LastKey): that is where the node-tree edit of the KRM function's output always put
// it, and its bytes stay the same.
func withAnnotations(m map[string]any, kv map[string]string) (map[string]any, error) {
	meta, ok := m["metadata"].(map[string]any)
	if !ok {
		return nil, fmt.Errorf("no metadata to annotate")
	}
	out := maps.Clone(m)
	if old, ok := meta["annotations"].(map[string]any); ok {
		ann := maps.Clone(old)
		for k, v := range kv {
			ann[k] = v
		}
		meta = maps.Clone(meta)
		meta["annotations"] = ann
		out["metadata"] = meta
		return out, nil
	}
	if _, ok := meta["annotations"]; ok {
		return nil, fmt.Errorf("metadata.annotations is not a mapping")
	}
	ann := make(map[string]any, len(kv))
	for k, v := range kv {
		ann[k] = v
	}
	out["metadata"] = yamlout.LastKey{Map: meta, Key: "annotations", Value: ann}
	return out, nil
}

// Unstructured converts every object.
func (objs Objects) Unstructured() ([]*unstructured.Unstructured, error) {
	out := make([]*unstructured.Unstructured, 0, len(objs))
	for _, o := range objs {
		u, err := o.Unstructured()
		if err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	return out, nil
}
