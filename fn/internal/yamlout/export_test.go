package yamlout

import (
	"bytes"
	"encoding/json"
)

// FastYAML is the emitter's output for m without the yaml.v3 fallback: a document (Go map
// style) or, with node, a sequence item in node style. ok is false where it leaves m to yaml.v3.
func FastYAML(m map[string]any, node bool) (out []byte, ok bool) {
	if node {
		w := NewWriter(Items, nil)
		ok = w.fast.seqItem(m)
		return w.fast.buf, ok
	}
	w := NewWriter(Documents, nil)
	ok = w.fast.document(m)
	return w.fast.buf, ok
}

// ReferenceYAML is what yaml.v3 writes for the same input.
func ReferenceYAML(m map[string]any, node bool) ([]byte, error) {
	if !node {
		return encodeFallback(Documents, m)
	}
	return encodeFallback(Items, m)
}

// MapPair is v through this package's JSON decoder and through encoding/json's (UseNumber,
// whole numbers int64, others float64), for comparing the two.
func MapPair(v any) (fast, reference map[string]any, err error) {
	j, err := json.Marshal(v)
	if err != nil {
		return nil, nil, err
	}
	if fast, err = decodeJSONObject(j); err != nil {
		return nil, nil, err
	}
	d := json.NewDecoder(bytes.NewReader(j))
	d.UseNumber()
	if err := d.Decode(&reference); err != nil {
		return nil, nil, err
	}
	return fast, fixNumbers(reference).(map[string]any), nil
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

// MapViaJSON is Map through json.Marshal and back.
func MapViaJSON(v any) (map[string]any, error) {
	j, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return decodeJSONObject(j)
}
