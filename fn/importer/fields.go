package importer

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// fields is the spec of one input object as written, with a record of what the mapping read:
// every set field the mapping did not read is reported (Report), so nothing is dropped silently.
type fields struct {
	from string // "ClusterPolicy cluster-policy" in messages and comments
	kind string // "ClusterPolicy" or "NVIDIADriver": selects the reasons table
	root string // the walked map's path in its document: "spec."
	spec map[string]any
	used map[string]bool
}

func newFields(from, kind string, spec map[string]any) *fields {
	return &fields{from: from, kind: kind, root: "spec.", spec: spec, used: map[string]bool{}}
}

// get returns the value at path ("driver.upgradePolicy.drain.enable") and marks it, and
// everything below it, read. A segment after "env" names an environment variable of that
// list ("toolkit.env.CONTAINERD_SOCKET"), whose value is returned.
func (f *fields) get(path string) (any, bool) {
	f.used[path] = true
	var cur any = f.spec
	segs := strings.Split(path, ".")
	for i, s := range segs {
		if i > 0 && segs[i-1] == "env" {
			list, _ := cur.([]any)
			cur = nil
			for _, e := range list {
				if m, ok := e.(map[string]any); ok && m["name"] == s {
					cur = m["value"]
					if cur == nil {
						cur = ""
					}
				}
			}
			if cur == nil {
				return nil, false
			}
			continue
		}
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[s]; !ok || cur == nil {
			return nil, false
		}
	}
	return cur, true
}

// str returns the value at path as a string ("" when unset); numbers and booleans are
// spelt as YAML would.
func (f *fields) str(path string) string {
	v, ok := f.get(path)
	if !ok {
		return ""
	}
	switch v := v.(type) {
	case string:
		return v
	case map[string]any, []any:
		b, _ := json.Marshal(v)
		return string(b)
	default:
		return fmt.Sprint(v)
	}
}

// boolean returns the value at path; nil when unset.
func (f *fields) boolean(path string) *bool {
	v, ok := f.get(path)
	if !ok {
		return nil
	}
	switch v := v.(type) {
	case bool:
		return &v
	case string: // an env value
		b := strings.EqualFold(v, "true")
		return &b
	}
	return nil
}

// into decodes the value at path into out (a typed field: tolerations, resources); false when
// unset.
func (f *fields) into(path string, out any) (bool, error) {
	v, ok := f.get(path)
	if !ok {
		return false, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return false, err
	}
	if err := json.Unmarshal(b, out); err != nil {
		return false, fmt.Errorf("%s spec.%s: %w", f.from, path, err)
	}
	return true, nil
}

// path is a field's path in messages: "ClusterPolicy cluster-policy spec.driver.version".
func (f *fields) path(p string) string { return f.from + " " + f.root + p }

// leaf is one set field: a scalar, a list (a whole), an empty map or one variable of an
// env list.
type leaf struct {
	path  string
	value any
}

func (f *fields) leaves() []leaf {
	var out []leaf
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch v := v.(type) {
		case map[string]any:
			if len(v) == 0 && prefix != "" {
				out = append(out, leaf{prefix, v})
			}
			for _, k := range sortedKeys(v) {
				walk(join(prefix, k), v[k])
			}
		case []any:
			if strings.HasSuffix(prefix, "env") && (prefix == "env" || strings.HasSuffix(prefix, ".env")) && len(v) > 0 {
				for _, e := range v {
					m, _ := e.(map[string]any)
					name, _ := m["name"].(string)
					out = append(out, leaf{join(prefix, name), m["value"]})
				}
				return
			}
			out = append(out, leaf{prefix, v})
		default:
			out = append(out, leaf{prefix, v})
		}
	}
	walk("", f.spec)
	return out
}

// read reports whether the mapping read p or a field above it.
func (f *fields) read(p string) bool {
	for {
		if f.used[p] {
			return true
		}
		i := strings.LastIndexByte(p, '.')
		if i < 0 {
			return false
		}
		p = p[:i]
	}
}

func join(prefix, k string) string {
	if prefix == "" {
		return k
	}
	return prefix + "." + k
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// inert reports whether v says nothing: the empty or off value a field has when a person (or
// the chart) wrote it out without using it.
func inert(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case string:
		return v == ""
	case bool:
		return !v
	case float64:
		return v == 0
	case []any:
		return len(v) == 0
	case map[string]any:
		return len(v) == 0
	}
	return false
}
