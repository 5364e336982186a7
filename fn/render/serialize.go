package render

import (
	"bytes"
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/kyaml/yaml"
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
	return yaml.MarshalWithOptions(m, &yaml.EncoderOptions{SeqIndent: yaml.CompactSequenceStyle})
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
