package doctor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/gpupolicy/gpupolicy/fn/pipeline"
	"github.com/gpupolicy/gpupolicy/fn/validate"
)

// policyKind is the kind of the function's input; a file holding it must be rendered first.
const policyKind = "GPUPolicy"

// renderPolicy runs the function's own pipeline (decode, default, validate, render), so doctor
// expects exactly what `gpupolicy-fn render` writes for the same file.
func renderPolicy(path string, data []byte) ([]*unstructured.Unstructured, error) {
	_, objs, res := pipeline.Load(data, validate.Options{})
	if res.HasErrors() {
		return nil, fmt.Errorf("-f %s is not a valid GPUPolicy:\n%s", path, strings.TrimRight(res.Text(path), "\n"))
	}
	out := make([]*unstructured.Unstructured, 0, len(objs))
	for _, o := range objs {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o.Obj)
		if err != nil {
			return nil, fmt.Errorf("-f %s: rendered %s: %w", path, o, err)
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
	return out, nil
}

// expectedFrom returns the rendered objects behind -f PATH: a directory of rendered YAML (as
// `gpupolicy-fn render -o DIR` writes it, Flux stage sub-directories included), a file of
// rendered objects, or a GPUPolicy file that render turns into objects.
func expectedFrom(path string) *Expected {
	return &Expected{Source: "policy " + path, Objects: func(context.Context) ([]*unstructured.Unstructured, error) {
		info, err := os.Stat(path)
		if err != nil {
			return nil, fmt.Errorf("-f %s: %w", path, err)
		}
		if info.IsDir() {
			return readRenderedDir(path)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("-f %s: %w", path, err)
		}
		objs, err := decodeObjects(path, data)
		if err != nil {
			return nil, err
		}
		for _, o := range objs {
			if o.GetKind() == policyKind {
				if len(objs) > 1 {
					return nil, fmt.Errorf("-f %s: holds a GPUPolicy and %d other objects; pass the policy alone or its rendered output", path, len(objs)-1)
				}
				return renderPolicy(path, data)
			}
		}
		return objs, nil
	}}
}

func readRenderedDir(dir string) ([]*unstructured.Unstructured, error) {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && (strings.HasSuffix(p, ".yaml") || strings.HasSuffix(p, ".yml") || strings.HasSuffix(p, ".json")) {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("-f %s: %w", dir, err)
	}
	sort.Strings(files)
	var all []*unstructured.Unstructured
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("-f %s: %w", dir, err)
		}
		objs, err := decodeObjects(f, data)
		if err != nil {
			return nil, err
		}
		for _, o := range objs {
			if o.GetKind() == policyKind {
				return nil, fmt.Errorf("-f %s: %s holds a GPUPolicy; pass the rendered directory or the policy file itself", dir, f)
			}
		}
		all = append(all, objs...)
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("-f %s: no YAML objects found; pass the directory gpupolicy-fn render -o wrote", dir)
	}
	return all, nil
}

// decodeObjects reads every document of a YAML or JSON stream; List and KRM ResourceList
// wrappers are unpacked so the function's own output can be passed as is.
func decodeObjects(name string, data []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for doc := 1; ; doc++ {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("%s: document %d: %w", name, doc, err)
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		if u.GetKind() == "" || u.GetAPIVersion() == "" {
			return nil, fmt.Errorf("%s: document %d has no apiVersion/kind; is it a Kubernetes object?", name, doc)
		}
		if k := u.GetKind(); k == "List" || k == "ResourceList" {
			items, _, _ := unstructured.NestedSlice(m, "items")
			for i, it := range items {
				im, ok := it.(map[string]any)
				if !ok {
					return nil, fmt.Errorf("%s: document %d: items[%d] is not an object", name, doc, i)
				}
				out = append(out, &unstructured.Unstructured{Object: im})
			}
			continue
		}
		out = append(out, u)
	}
}
