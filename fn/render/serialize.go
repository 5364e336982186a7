package render

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Map is the object as JSON-compatible data without the noise typed structs carry
// (creationTimestamp: null, an all-zero status): what a person reviews and what is applied.
func (o Object) Map() (map[string]any, error) {
	m, err := toMap(o.Obj)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o, err)
	}
	// A rendered object has no status; the API server owns it.
	delete(m, "status")
	dropNullTimestamps(m)
	return m, nil
}

// toMap is v through its JSON form (the form the API server reads), numbers kept exact:
// whole numbers become int64, others float64.
func toMap(v any) (map[string]any, error) {
	j, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return decodeJSONObject(j)
}

// marshalYAML writes JSON-compatible data as YAML the way kustomize does: sorted keys,
// compact sequences, no line wrapping (long CEL and PromQL stay on one line for review).
func marshalYAML(m map[string]any) ([]byte, error) {
	return EncodeYAML(m) // a map directly: cheaper than building nodes first
}

// EncodeYAML writes v (data or a *yaml.Node) through yaml.v3 the way kustomize does:
// indent 2, sequences compact under their key. The KRM function's ResourceList and the
// rendered files share it so both read the same.
func EncodeYAML(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	enc.CompactSeqIndent()
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Node is the object as a YAML node tree, for callers that edit or embed it. (The KRM
// function writes its objects with Objects.AppendItems, the same bytes without the tree.)
func (o Object) Node() (*yaml.Node, error) {
	m, err := o.Map()
	if err != nil {
		return nil, err
	}
	return toNode(m), nil
}

// toNode builds the node tree of JSON-compatible data directly; yaml.Node.Encode would emit
// text and parse it again, which is most of the cost of rendering. Keys are sorted; a string
// that would read as another type is quoted by the encoder (its tag is !!str); multi-line
// strings (the drop-in, the config documents) use the literal block style.
func toNode(v any) *yaml.Node {
	switch t := v.(type) {
	case map[string]any:
		n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		for _, k := range slices.Sorted(maps.Keys(t)) {
			n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k}, toNode(t[k]))
		}
		return n
	case lastKey:
		n := toNode(t.m)
		n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: t.key}, toNode(t.value))
		return n
	case []any:
		n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		for _, x := range t {
			n.Content = append(n.Content, toNode(x))
		}
		return n
	case string:
		n := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: t}
		if strings.Contains(t, "\n") {
			n.Style = yaml.LiteralStyle
		}
		return n
	case int64:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.FormatInt(t, 10)}
	case float64:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!float", Value: strconv.FormatFloat(t, 'g', -1, 64)}
	case bool:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(t)}
	case nil:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}
	}
	panic(fmt.Sprintf("render: %T is not JSON data", v))
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
	return o.appendYAML(newEmitter(styleMap))
}

// appendYAML appends the object's document to e.buf and returns it (e.buf's storage).
func (o Object) appendYAML(e *emitter) ([]byte, error) {
	m, err := o.Map()
	if err != nil {
		return nil, err
	}
	return e.appendDocument(m)
}

// appendDocument appends m as one document, through the fast emitter when it covers m and
// through yaml.v3 otherwise (same bytes either way).
func (e *emitter) appendDocument(m map[string]any) ([]byte, error) {
	start := len(e.buf)
	if e.document(m) {
		return e.buf[start:], nil
	}
	e.buf = e.buf[:start]
	y, err := marshalYAML(m)
	if err != nil {
		return nil, err
	}
	e.buf = append(e.buf, y...)
	return e.buf[start:], nil
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
	e := newEmitter(styleMap)
	e.buf = make([]byte, 0, 4096*len(objs))
	for i, o := range objs {
		if i > 0 {
			e.buf = append(e.buf, "---\n"...)
		}
		if _, err := o.appendYAML(e); err != nil {
			return nil, err
		}
	}
	return e.buf, nil
}

// AppendItems appends objs to dst as the items of a block sequence at column 0 ("- kind:
// ..."), each with the extra annotations annotate gives it (may be nil): the bytes yaml.v3
// writes for the node trees of Object.Node in a sequence at the top level with indent 2 and
// compact sequences, which is where the KRM function's ResourceList keeps its items.
func (objs Objects) AppendItems(dst []byte, annotate func(Object) map[string]string) ([]byte, error) {
	e := newEmitter(styleNode)
	e.buf = dst
	for _, o := range objs {
		m, err := o.Map()
		if err != nil {
			return nil, err
		}
		if annotate != nil {
			if kv := annotate(o); len(kv) > 0 {
				if err := setAnnotations(m, kv); err != nil {
					return nil, fmt.Errorf("%s: %w", o, err)
				}
			}
		}
		start := len(e.buf)
		if e.seqItem(m) {
			continue
		}
		e.buf = e.buf[:start]
		y, err := nodeItemYAML(m)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", o, err)
		}
		e.buf = append(e.buf, y...)
	}
	return e.buf, nil
}

// setAnnotations adds annotations to metadata.annotations. Where the object has none yet,
// the new mapping goes after metadata's other keys, not in key order: that is where the
// node-tree edit of the KRM function's output always put it, and its bytes stay the same.
func setAnnotations(m map[string]any, kv map[string]string) error {
	meta, ok := m["metadata"].(map[string]any)
	if !ok {
		return fmt.Errorf("no metadata to annotate")
	}
	if ann, ok := meta["annotations"].(map[string]any); ok {
		for k, v := range kv {
			ann[k] = v
		}
		return nil
	}
	if _, ok := meta["annotations"]; ok {
		return fmt.Errorf("metadata.annotations is not a mapping")
	}
	ann := make(map[string]any, len(kv))
	for k, v := range kv {
		ann[k] = v
	}
	m["metadata"] = lastKey{m: meta, key: "annotations", value: ann}
	return nil
}

// lastKey is a mapping written with key: value after m's sorted keys.
type lastKey struct {
	m     map[string]any
	key   string
	value map[string]any
}

// nodeItemYAML is m's node tree as the one item of a top-level sequence, through yaml.v3.
func nodeItemYAML(m map[string]any) ([]byte, error) {
	return EncodeYAML(&yaml.Node{Kind: yaml.SequenceNode, Content: []*yaml.Node{toNode(m)}})
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
