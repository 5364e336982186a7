package importer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
)

// YAML is the imported policy as a document a person reviews: fields in the order of the
// GPUPolicy type, unset ones left out, each set field with a comment naming where its value
// came from, and the header saying what to check.
func (r *Result) YAML() ([]byte, error) {
	root, err := node(reflect.ValueOf(r.Policy), "", r.Sources)
	if err != nil {
		return nil, err
	}
	var head strings.Builder
	head.WriteString("Imported from the GPU Operator by gpupolicy-fn import. Review it before you commit it:\n")
	head.WriteString("each value says where it came from; fields with no equivalent were listed on stderr.")
	for _, n := range r.Notes {
		head.WriteString("\nCheck: " + n)
	}
	root.HeadComment = head.String()
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{root}}); err != nil {
		return nil, err
	}
	return buf.Bytes(), enc.Close()
}

// Source is where the value of field came from; field is a validation result's path
// ("spec.nodePools[0].driver.version").
func (r *Result) Source(field string) string {
	p := strings.NewReplacer("[", ".", "]", "").Replace(field)
	return r.Sources[p]
}

// WriteYAML writes YAML to w.
func (r *Result) WriteYAML(w io.Writer) error {
	b, err := r.YAML()
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

var (
	policyPkg  = reflect.TypeOf(v1alpha1.GPUPolicy{}).PkgPath()
	marshalerT = reflect.TypeOf((*json.Marshaler)(nil)).Elem()
)

// node encodes v (a GPUPolicy value) at path; nil when v is empty.
func node(v reflect.Value, path string, sources map[string]string) (*yaml.Node, error) {
	explicit := false // reached through a pointer: a zero value was set (enabled: false)
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return nil, nil
		}
		v, explicit = v.Elem(), true
	}
	t := v.Type()
	// Our own structs field by field; everything else (Kubernetes types, custom JSON) as its
	// JSON says, so the document decodes back to the same value.
	if t.Kind() == reflect.Struct && t.PkgPath() == policyPkg && !t.Implements(marshalerT) {
		m := &yaml.Node{Kind: yaml.MappingNode}
		for i := range t.NumField() {
			name := strings.Split(t.Field(i).Tag.Get("json"), ",")[0]
			if name == "" || name == "-" {
				continue
			}
			p := join(path, name)
			val, err := node(v.Field(i), p, sources)
			if err != nil {
				return nil, err
			}
			if val == nil {
				continue
			}
			key := &yaml.Node{Kind: yaml.ScalarNode, Value: name}
			if src := sources[p]; src != "" {
				key.LineComment = "from " + src
			}
			m.Content = append(m.Content, key, val)
		}
		if len(m.Content) == 0 {
			return nil, nil
		}
		return m, nil
	}
	if t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct && t.Elem().PkgPath() == policyPkg {
		if v.Len() == 0 {
			return nil, nil
		}
		seq := &yaml.Node{Kind: yaml.SequenceNode}
		for i := range v.Len() {
			p := path + "." + strconv.Itoa(i)
			item, err := node(v.Index(i), p, sources)
			if err != nil {
				return nil, err
			}
			if item == nil {
				item = &yaml.Node{Kind: yaml.MappingNode}
			}
			if src := sources[p]; src != "" {
				item.HeadComment = "from " + src
			}
			seq.Content = append(seq.Content, item)
		}
		return seq, nil
	}
	if v.IsZero() && !explicit {
		return nil, nil
	}
	b, err := json.Marshal(v.Interface())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var n yaml.Node
	if err := yaml.Unmarshal(b, &n); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	out := n.Content[0]
	clearStyle(out)
	return out, nil
}

// clearStyle makes JSON's flow style block style and quotes only what YAML needs quoted.
func clearStyle(n *yaml.Node) {
	n.Style = 0
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" && needsQuotes(n.Value) {
		n.Style = yaml.DoubleQuotedStyle
	}
	for _, c := range n.Content {
		clearStyle(c)
	}
}

// needsQuotes: a string that YAML would read as another type (a version "12.8", "true").
func needsQuotes(s string) bool {
	var v any
	if err := yaml.Unmarshal([]byte(s), &v); err != nil {
		return true
	}
	_, isString := v.(string)
	return !isString || v != s
}
