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
	d := json.NewDecoder(bytes.NewReader(j))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		return nil, err
	}
	return fixNumbers(m).(map[string]any), nil
}

func fixNumbers(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			t[k] = fixNumbers(x)
		}
	case []any:
		for i, x := range t {
			t[i] = fixNumbers(x)
		}
	case json.Number:
		if i, err := t.Int64(); err == nil {
			return i
		}
		f, _ := t.Float64()
		return f
	}
	return v
}

// marshalYAML writes JSON-compatible data as YAML the way kustomize does: sorted keys,
// compact sequences, no line wrapping (long CEL and PromQL stay on one line for review).
func marshalYAML(m map[string]any) ([]byte, error) {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	enc.CompactSeqIndent()
	if err := enc.Encode(m); err != nil { // a map directly: cheaper than building nodes first
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// Node is the object as a YAML node tree, for callers that assemble a larger document (the
// KRM function's ResourceList) and encode it once.
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
	m, err := o.Map()
	if err != nil {
		return nil, err
	}
	return marshalYAML(m)
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
	var b bytes.Buffer
	for i, o := range objs {
		y, err := o.YAML()
		if err != nil {
			return nil, err
		}
		if i > 0 {
			b.WriteString("---\n")
		}
		b.Write(y)
	}
	return b.Bytes(), nil
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
