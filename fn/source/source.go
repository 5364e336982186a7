// Package source reads the rendered objects behind a POLICY|DIR|FILE argument, the one way
// audit, diff and doctor take "what the GPU stack should be": a GPUPolicy file (rendered here
// through the function's own pipeline, so the objects are exactly what `gpupolicy-fn render`
// writes), a directory written by `gpupolicy-fn render -o` (Flux stage sub-directories
// included), or one file of rendered objects such as `kustomize build` output or the
// function's own ResourceList.
package source

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/fn/pipeline"
	"github.com/gpupolicy/gpupolicy/fn/validate"
)

// Input is a rendered tree and where it came from.
type Input struct {
	Path    string
	Policy  *v1alpha1.GPUPolicy // nil unless the input was a policy
	Objects []*unstructured.Unstructured
	// Results are the policy's warnings; a policy with errors fails Load.
	Results validate.Results
}

// maxFileBytes bounds one file of rendered objects (a `kustomize build` of the largest policy
// the limits allow is about 10 MiB); a policy file has its own, smaller limit
// (v1alpha1.MaxPolicyBytes).
const maxFileBytes = 64 << 20

// readFile reads a file up to maxFileBytes.
func readFile(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fileError(path, err)
	}
	if err := v1alpha1.CheckSize(path, st.Size(), maxFileBytes); err != nil {
		return nil, err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fileError(path, err)
	}
	return data, nil
}

// Load reads POLICY|DIR|FILE. Every error starts with the file it is about, so a caller may
// put its flag in front ("-f " + err).
func Load(path string, opts validate.Options) (*Input, error) {
	if path == "-" {
		return nil, ErrStdin
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, fileError(path, err)
	}
	in := &Input{Path: path}
	if st.IsDir() {
		in.Objects, err = readDir(path)
		return in, err
	}
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	if isPolicy(data) {
		p, objs, res := pipeline.Load(data, opts)
		if res.HasErrors() {
			return nil, fmt.Errorf("%s is not a valid GPUPolicy:\n%s", path, strings.TrimSuffix(res.Text(path), "\n"))
		}
		in.Policy, in.Results = p, res
		in.Objects, err = objs.Unstructured()
		return in, err
	}
	if in.Objects, err = Decode(path, data); err == nil && len(in.Objects) == 0 {
		// An empty file would pass as a stack with nothing to review: "0 workloads", no diff.
		return nil, fmt.Errorf("%s holds no Kubernetes objects (it is empty or only comments): pass a GPUPolicy file, a directory written by `gpupolicy-fn render -o` or a file of rendered objects", path)
	}
	return in, err
}

// ErrStdin refuses "-", which other tools read as stdin: "open -: no such file" would not say
// so. A file of that name is "./-".
var ErrStdin = errors.New(`"-" is not read as stdin: save the input to a file and pass its name, or pass /dev/stdin to read it from a pipe`)

// fileError names the file first ("PATH: no such file or directory") instead of the
// operation os puts first ("stat PATH: ...").
func fileError(path string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", pe.Path, pe.Err)
	}
	return fmt.Errorf("%s: %w", path, err)
}

// isPolicy reports whether the file's first document is a GPUPolicy. Only the first one is
// looked at: a policy file with more documents is the decoder's error to report.
func isPolicy(data []byte) bool {
	var head struct {
		Kind string `json:"kind"`
	}
	doc, _ := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data))).Read()
	return yaml.Unmarshal(doc, &head) == nil && head.Kind == v1alpha1.Kind
}

// readDir reads every *.yaml, *.yml and *.json under dir in lexical order, so the objects
// come in the same order on every machine. Hidden directories (.git) are not part of a tree.
func readDir(dir string) ([]*unstructured.Unstructured, error) {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if strings.HasPrefix(d.Name(), ".") && p != dir {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(p) {
		case ".yaml", ".yml", ".json":
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return nil, fileError(dir, err)
	}
	sort.Strings(files)
	var out []*unstructured.Unstructured
	for _, f := range files {
		data, err := readFile(f)
		if err != nil {
			return nil, err
		}
		objs, err := Decode(f, data)
		if err != nil {
			return nil, err
		}
		out = append(out, objs...)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s holds no Kubernetes objects (*.yaml): pass a directory written by `gpupolicy-fn render -o` or a policy file", dir)
	}
	return out, nil
}

// Decode reads every document of a YAML or JSON stream of rendered objects. List and KRM
// ResourceList wrappers are unpacked so the function's own output can be passed as is;
// kustomize's own Kustomization is build configuration, not a cluster object, and is skipped;
// a GPUPolicy is an error since a rendered tree must hold only its output. Documents are
// numbered from 1 in errors.
func Decode(file string, data []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for doc := 1; ; doc++ {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("%s: document %d: %w", file, doc, err)
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		if err := check(u); err != nil {
			return nil, fmt.Errorf("%s: document %d %w", file, doc, err)
		}
		if k := u.GetKind(); k != "List" && k != "ResourceList" {
			if !isKustomization(u) {
				out = append(out, u)
			}
			continue
		}
		items, _, _ := unstructured.NestedSlice(m, "items")
		for i, it := range items {
			im, ok := it.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("%s: document %d: items[%d] is not an object", file, doc, i)
			}
			item := &unstructured.Unstructured{Object: im}
			if err := check(item); err != nil {
				return nil, fmt.Errorf("%s: document %d: items[%d] %w", file, doc, i, err)
			}
			if !isKustomization(item) {
				out = append(out, item)
			}
		}
	}
}

// check rejects what is not a rendered Kubernetes object; the error reads after "document N".
func check(u *unstructured.Unstructured) error {
	switch {
	case u.GetKind() == "" || u.GetAPIVersion() == "":
		return errors.New("has no apiVersion or kind: not a Kubernetes object")
	case u.GetKind() == v1alpha1.Kind:
		return errors.New("is a GPUPolicy inside a rendered tree: pass the policy file itself or only rendered output")
	}
	return nil
}

func isKustomization(u *unstructured.Unstructured) bool {
	return u.GetKind() == "Kustomization" && strings.HasPrefix(u.GetAPIVersion(), "kustomize.config.k8s.io/")
}
