package overlay

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// mergePatch merges a strategic-merge patch into obj with the semantics kustomize has for an
// object whose kind it has no OpenAPI schema for (every custom resource, the GPUPolicy
// included): mappings merge key by key, a null deletes the key, `$patch: replace` replaces a
// mapping and `$patch: delete` removes it, and a list is replaced whole (no merge by name:
// kustomize knows merge keys only from a schema).
func mergePatch(obj, patch *yaml.Node) error {
	out, err := merge(obj, patch, nil)
	if err != nil {
		return err
	}
	if out == nil {
		return fmt.Errorf("the patch deletes the whole object ($patch: delete): remove the object from the overlay's resources instead")
	}
	*obj = *out
	return nil
}

// merge returns dst with patch merged in; nil means the key goes away.
func merge(dst, patch *yaml.Node, path []string) (*yaml.Node, error) {
	if isNull(patch) {
		return nil, nil
	}
	if isNull(dst) {
		return added(patch, path)
	}
	if dst.Kind != patch.Kind {
		return nil, fmt.Errorf("%s: the patch gives %s where the object has %s: patch it with a value of the same shape, or null it first", dotted(path), kindName(patch), kindName(dst))
	}
	if patch.Kind != yaml.MappingNode {
		return deepCopy(patch), nil // scalars and lists: the patch's value
	}
	d, err := directive(patch, path)
	switch {
	case err != nil:
		return nil, err
	case d == "delete":
		return nil, nil
	case d == "replace":
		return added(patch, path)
	}
	for i := 0; i+1 < len(patch.Content); i += 2 {
		key := patch.Content[i].Value
		if key == directiveKey {
			continue
		}
		at := append(path, key)
		j := fieldIndex(dst, key)
		var old *yaml.Node
		if j >= 0 {
			old = dst.Content[j+1]
		}
		v, err := merge(old, patch.Content[i+1], at)
		if err != nil {
			return nil, err
		}
		switch {
		case v == nil && j >= 0:
			dst.Content = append(dst.Content[:j], dst.Content[j+2:]...)
		case v != nil && j >= 0:
			dst.Content[j+1] = v
		case v != nil:
			dst.Content = append(dst.Content, deepCopy(patch.Content[i]), v)
		}
	}
	return dst, nil
}

// added is a patch value where the object has none: its nulls and directives resolved
// (kustomize walks into it as into a merge with nothing).
func added(patch *yaml.Node, path []string) (*yaml.Node, error) {
	if patch.Kind != yaml.MappingNode {
		return deepCopy(patch), nil
	}
	if d, err := directive(patch, path); err != nil || d == "delete" {
		return nil, err
	}
	out := &yaml.Node{Kind: yaml.MappingNode, Tag: patch.Tag, Style: patch.Style, Line: patch.Line, Column: patch.Column}
	for i := 0; i+1 < len(patch.Content); i += 2 {
		key := patch.Content[i].Value
		if key == directiveKey || isNull(patch.Content[i+1]) {
			continue
		}
		v, err := added(patch.Content[i+1], append(path, key))
		if err != nil {
			return nil, err
		}
		if v != nil {
			out.Content = append(out.Content, deepCopy(patch.Content[i]), v)
		}
	}
	return out, nil
}

const directiveKey = "$patch"

func directive(m *yaml.Node, path []string) (string, error) {
	i := fieldIndex(m, directiveKey)
	if i < 0 {
		return "merge", nil
	}
	switch v := m.Content[i+1].Value; v {
	case "merge", "replace", "delete":
		return v, nil
	default:
		return "", fmt.Errorf("%s: $patch: %q is not a strategic-merge directive: use merge, replace or delete", dotted(append(path, directiveKey)), v)
	}
}

func fieldIndex(m *yaml.Node, key string) int {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return i
		}
	}
	return -1
}

func dotted(path []string) string {
	if len(path) == 0 {
		return "the object"
	}
	return strings.Join(path, ".")
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	default:
		return "a value (" + n.Value + ")"
	}
}

// op is one JSON 6902 operation.
type op struct {
	Op    string    `yaml:"op"`
	Path  string    `yaml:"path"`
	From  string    `yaml:"from"`
	Value yaml.Node `yaml:"value"`
}

func decodeOps(seq *yaml.Node) ([]op, error) {
	var ops []op
	if err := seq.Decode(&ops); err != nil {
		return nil, err
	}
	for i, o := range ops {
		switch o.Op {
		case "add", "replace", "test":
			if o.Value.Kind == 0 {
				return nil, fmt.Errorf("operation %d (%s %s) has no value", i+1, o.Op, o.Path)
			}
		case "remove":
		case "move", "copy":
			if o.From == "" {
				return nil, fmt.Errorf("operation %d (%s %s) has no from", i+1, o.Op, o.Path)
			}
		default:
			return nil, fmt.Errorf("operation %d: op %q is not a JSON 6902 operation: use add, remove, replace, move, copy or test", i+1, o.Op)
		}
	}
	return ops, nil
}

// applyOps applies a JSON 6902 patch to obj; on any failure obj is unchanged.
func applyOps(obj *yaml.Node, ops []op) error {
	work := deepCopy(obj)
	for i, o := range ops {
		if err := applyOp(work, o); err != nil {
			return fmt.Errorf("operation %d (%s %s): %w", i+1, o.Op, o.Path, err)
		}
	}
	*obj = *work
	return nil
}

func applyOp(root *yaml.Node, o op) error {
	switch o.Op {
	case "add":
		return pointerSet(root, o.Path, deepCopy(&o.Value), true)
	case "replace":
		return pointerSet(root, o.Path, deepCopy(&o.Value), false)
	case "remove":
		_, err := pointerRemove(root, o.Path)
		return err
	case "test":
		v, err := pointerGet(root, o.Path)
		if err != nil {
			return err
		}
		var got, want any
		_ = v.Decode(&got)
		_ = o.Value.Decode(&want)
		if !reflect.DeepEqual(got, want) {
			return fmt.Errorf("test failed: the value is not the one the patch expects")
		}
		return nil
	case "move":
		v, err := pointerRemove(root, o.From)
		if err != nil {
			return fmt.Errorf("from: %w", err)
		}
		return pointerSet(root, o.Path, v, true)
	default: // copy
		v, err := pointerGet(root, o.From)
		if err != nil {
			return fmt.Errorf("from: %w", err)
		}
		return pointerSet(root, o.Path, deepCopy(v), true)
	}
}

// tokens splits an RFC 6901 pointer.
func tokens(pointer string) ([]string, error) {
	if pointer == "" {
		return nil, nil
	}
	if !strings.HasPrefix(pointer, "/") {
		return nil, fmt.Errorf("path %q does not start with /", pointer)
	}
	parts := strings.Split(pointer[1:], "/")
	for i, p := range parts {
		parts[i] = strings.ReplaceAll(strings.ReplaceAll(p, "~1", "/"), "~0", "~")
	}
	return parts, nil
}

// parent resolves all but the last token of pointer.
func parent(root *yaml.Node, pointer string) (*yaml.Node, string, error) {
	toks, err := tokens(pointer)
	if err != nil {
		return nil, "", err
	}
	if len(toks) == 0 {
		return nil, "", fmt.Errorf("the whole object cannot be the target: give a path inside it")
	}
	n := root
	for _, t := range toks[:len(toks)-1] {
		if n, err = child(n, t); err != nil {
			return nil, "", err
		}
	}
	return n, toks[len(toks)-1], nil
}

func child(n *yaml.Node, tok string) (*yaml.Node, error) {
	switch n.Kind {
	case yaml.MappingNode:
		if i := fieldIndex(n, tok); i >= 0 {
			return n.Content[i+1], nil
		}
		return nil, fmt.Errorf("no key %q", tok)
	case yaml.SequenceNode:
		i, err := index(tok, len(n.Content)-1)
		if err != nil {
			return nil, err
		}
		return n.Content[i], nil
	}
	return nil, fmt.Errorf("%q: not inside a mapping or list", tok)
}

func index(tok string, max int) (int, error) {
	i, err := strconv.Atoi(tok)
	if err != nil || i < 0 || (tok != "0" && strings.HasPrefix(tok, "0")) {
		return 0, fmt.Errorf("%q is not a list index", tok)
	}
	if i > max {
		return 0, fmt.Errorf("index %d is past the end of the list (%d items)", i, max)
	}
	return i, nil
}

func pointerGet(root *yaml.Node, pointer string) (*yaml.Node, error) {
	p, last, err := parent(root, pointer)
	if err != nil {
		return nil, err
	}
	return child(p, last)
}

// pointerSet adds (insert) or replaces (an existing key or index only) the value at pointer.
func pointerSet(root *yaml.Node, pointer string, v *yaml.Node, insert bool) error {
	p, last, err := parent(root, pointer)
	if err != nil {
		return err
	}
	switch p.Kind {
	case yaml.MappingNode:
		i := fieldIndex(p, last)
		switch {
		case i >= 0:
			p.Content[i+1] = v
		case insert:
			p.Content = append(p.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: last}, v)
		default:
			return fmt.Errorf("no key %q to replace (use add)", last)
		}
		return nil
	case yaml.SequenceNode:
		if insert && last == "-" {
			p.Content = append(p.Content, v)
			return nil
		}
		max := len(p.Content) - 1
		if insert {
			max++
		}
		i, err := index(last, max)
		if err != nil {
			return err
		}
		if insert {
			p.Content = append(p.Content[:i], append([]*yaml.Node{v}, p.Content[i:]...)...)
		} else {
			p.Content[i] = v
		}
		return nil
	}
	return fmt.Errorf("%q: not inside a mapping or list", last)
}

func pointerRemove(root *yaml.Node, pointer string) (*yaml.Node, error) {
	p, last, err := parent(root, pointer)
	if err != nil {
		return nil, err
	}
	v, err := child(p, last)
	if err != nil {
		return nil, err
	}
	if p.Kind == yaml.MappingNode {
		i := fieldIndex(p, last)
		p.Content = append(p.Content[:i], p.Content[i+2:]...)
	} else {
		i, _ := strconv.Atoi(last)
		p.Content = append(p.Content[:i], p.Content[i+1:]...)
	}
	return v, nil
}
