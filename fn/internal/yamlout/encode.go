package yamlout

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// Map is v through its JSON form (the form the API server reads) as JSON-compatible data,
// numbers kept exact: whole numbers become int64, others float64. It is what a Writer and
// Node take.
//
// It walks v rather than writing and reading JSON (see data); the tests hold it to
// json.Marshal and back.
func Map(v any) (map[string]any, error) {
	if v == nil {
		return nil, errors.New("not a JSON object")
	}
	d, err := data(reflect.ValueOf(v))
	if err != nil {
		return nil, err
	}
	m, ok := d.(map[string]any)
	if !ok {
		return nil, errors.New("not a JSON object")
	}
	return m, nil
}

// Encode writes v (data or a *yaml.Node) through yaml.v3 the way kustomize does: indent 2,
// sequences compact under their key. The KRM function's ResourceList and the rendered files
// share these settings so both read the same.
func Encode(v any) ([]byte, error) {
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

// encodeFallback is what a Writer's direct path stands in for: a Go map encoded directly
// (cheaper than building nodes first) for Documents, m's node tree as the one item of a
// top-level sequence for Items.
func encodeFallback(form Form, m map[string]any) ([]byte, error) {
	if form == Items {
		return Encode(&yaml.Node{Kind: yaml.SequenceNode, Content: []*yaml.Node{Node(m)}})
	}
	return Encode(m)
}

// LastKey is a mapping written with Key: Value after Map's sorted keys. The KRM function adds
// annotations to objects that had none this way: that is where its node-tree edit of the
// output always put them, and their bytes stay the same.
type LastKey struct {
	Map   map[string]any
	Key   string
	Value map[string]any
}

// Node builds the node tree of JSON-compatible data (and LastKey) directly; yaml.Node.Encode
// would emit text and parse it again, which is most of the cost of rendering. Keys are
// sorted; a string that would read as another type is quoted by the encoder (its tag is
// !!str); multi-line strings (the drop-in, the config documents) use the literal block style.
func Node(v any) *yaml.Node {
	switch t := v.(type) {
	case map[string]any:
		n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		for _, k := range slices.Sorted(maps.Keys(t)) {
			n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k}, Node(t[k]))
		}
		return n
	case LastKey:
		n := Node(t.Map)
		n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: t.Key}, Node(t.Value))
		return n
	case []any:
		n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		for _, x := range t {
			n.Content = append(n.Content, Node(x))
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
	panic(fmt.Sprintf("yamlout: %T is not JSON data", v))
}
