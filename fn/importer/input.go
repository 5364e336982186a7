package importer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	nvidiav1 "github.com/NVIDIA/gpu-operator/api/nvidia/v1"
	nvidiav1alpha1 "github.com/NVIDIA/gpu-operator/api/nvidia/v1alpha1"
	yaml "go.yaml.in/yaml/v3"
	corev1 "k8s.io/api/core/v1"
	sigsyaml "sigs.k8s.io/yaml"
)

// Input is what the importer reads: the operator's objects, as decoded by NVIDIA's types (so
// an unknown field or a value of the wrong type is an error) and as written (the fields a
// person set, which the mapping walks).
type Input struct {
	ClusterPolicies []Object[nvidiav1.ClusterPolicy]
	NVIDIADrivers   []Object[nvidiav1alpha1.NVIDIADriver]
	Nodes           []corev1.Node
	ConfigMaps      []corev1.ConfigMap
	// Values are Helm values documents (no apiVersion and kind): the chart's template turns
	// them into objects (RenderChart) before Import.
	Values []Document
}

// Object is one decoded operator object with the fields its document sets.
type Object[T any] struct {
	Typed T
	// Spec is the object's spec as written (JSON types: map[string]any, []any, string,
	// float64, bool).
	Spec map[string]any
	// From names the document: "FILE: ClusterPolicy cluster-policy".
	From string
}

// Document is one YAML document of a file.
type Document struct {
	File  string
	Index int // 1-based position in the file
	Data  map[string]any
}

func (d Document) where() string {
	return fmt.Sprintf("%s (document %d)", d.File, d.Index)
}

// Read reads every YAML document of r (named file in errors): objects, `kind: List`s of them
// (`kubectl get ... -o yaml`) and Helm values. An unknown kind, a foreign API group or a value
// NVIDIA's types refuse is an error naming the file, the document and the field.
func (in *Input) Read(file string, r io.Reader) error {
	dec := yaml.NewDecoder(r)
	for i := 1; ; i++ {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s (document %d): not YAML: %w", file, i, err)
		}
		var data map[string]any
		raw, err := yaml.Marshal(&n)
		if err != nil {
			return fmt.Errorf("%s (document %d): %w", file, i, err)
		}
		if err := sigsyaml.Unmarshal(raw, &data); err != nil {
			return fmt.Errorf("%s (document %d): not a mapping: %w", file, i, err)
		}
		if data == nil {
			continue // an empty document
		}
		if err := in.add(Document{File: file, Index: i, Data: data}); err != nil {
			return err
		}
	}
}

func (in *Input) add(d Document) error {
	apiVersion, _ := d.Data["apiVersion"].(string)
	kind, _ := d.Data["kind"].(string)
	if apiVersion == "" && kind == "" {
		in.Values = append(in.Values, d)
		return nil
	}
	if kind == "List" || strings.HasSuffix(kind, "List") && apiVersion == "v1" {
		items, _ := d.Data["items"].([]any)
		for _, it := range items {
			m, ok := it.(map[string]any)
			if !ok {
				return fmt.Errorf("%s: an item of the List is not an object", d.where())
			}
			if err := in.add(Document{File: d.File, Index: d.Index, Data: m}); err != nil {
				return err
			}
		}
		return nil
	}
	name := ""
	if md, ok := d.Data["metadata"].(map[string]any); ok {
		name, _ = md["name"].(string)
	}
	from := fmt.Sprintf("%s: %s %s", d.File, kind, name)
	switch apiVersion + " " + kind {
	case nvidiav1.SchemeGroupVersion.String() + " ClusterPolicy":
		o, err := decodeObject[nvidiav1.ClusterPolicy](d, from)
		if err != nil {
			return err
		}
		in.ClusterPolicies = append(in.ClusterPolicies, o)
	case nvidiav1alpha1.SchemeGroupVersion.String() + " NVIDIADriver":
		o, err := decodeObject[nvidiav1alpha1.NVIDIADriver](d, from)
		if err != nil {
			return err
		}
		in.NVIDIADrivers = append(in.NVIDIADrivers, o)
	case "v1 Node":
		var n corev1.Node
		if err := remarshal(d.Data, &n, false); err != nil {
			return fmt.Errorf("%s: Node %s: %w", d.where(), name, err)
		}
		in.Nodes = append(in.Nodes, n)
	case "v1 ConfigMap":
		var cm corev1.ConfigMap
		if err := remarshal(d.Data, &cm, false); err != nil {
			return fmt.Errorf("%s: ConfigMap %s: %w", d.where(), name, err)
		}
		in.ConfigMaps = append(in.ConfigMaps, cm)
	default:
		return fmt.Errorf("%s: %s %q (apiVersion %q) is not an input of import: pass ClusterPolicy (nvidia.com/v1), NVIDIADriver (nvidia.com/v1alpha1), Node and ConfigMap objects, or the gpu-operator chart's Helm values", d.where(), kind, name, apiVersion)
	}
	return nil
}

// decodeObject decodes d strictly with NVIDIA's type: a field the type does not define, or a
// value of another type, is an error naming it.
func decodeObject[T any](d Document, from string) (Object[T], error) {
	o := Object[T]{From: from}
	if err := remarshal(d.Data, &o.Typed, true); err != nil {
		return o, fmt.Errorf("%s: %s: %w", d.where(), strings.TrimPrefix(from, d.File+": "), err)
	}
	o.Spec, _ = d.Data["spec"].(map[string]any)
	if o.Spec == nil {
		o.Spec = map[string]any{}
	}
	return o, nil
}

func remarshal(data map[string]any, into any, strict bool) error {
	b, err := json.Marshal(data)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(into); err != nil {
		return fmt.Errorf("%s (the GPU Operator's type refuses it)", strings.TrimPrefix(err.Error(), "json: "))
	}
	return nil
}
