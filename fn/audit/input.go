package audit

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

// Input is a rendered tree as audit and diff read it: from a policy file (rendered here), a
// directory written by `gpupolicy-fn render -o`, or one multi-document YAML file (kustomize
// build output).
type Input struct {
	Path    string
	Policy  *v1alpha1.GPUPolicy // nil unless the input was a policy
	Objects []*unstructured.Unstructured
	// Results are the policy's warnings; a policy with errors fails Load.
	Results validate.Results
}

// Load reads POLICY|DIR|FILE.
func Load(path string, opts validate.Options) (*Input, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	in := &Input{Path: path}
	if st.IsDir() {
		in.Objects, err = readDir(path)
		return in, err
	}
	data, err := os.ReadFile(path)
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
	in.Objects, err = readDocuments(path, data)
	return in, err
}

// isPolicy reports whether the file's first document is a GPUPolicy.
func isPolicy(data []byte) bool {
	var head struct {
		Kind string `json:"kind"`
	}
	doc, _ := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data))).Read()
	return yaml.Unmarshal(doc, &head) == nil && head.Kind == v1alpha1.Kind
}

// readDir reads every *.yaml and *.yml under dir in lexical order.
func readDir(dir string) ([]*unstructured.Unstructured, error) {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && p != dir {
			return filepath.SkipDir
		}
		if ext := filepath.Ext(p); !d.IsDir() && (ext == ".yaml" || ext == ".yml") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var out []*unstructured.Unstructured
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		objs, err := readDocuments(f, data)
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

// readDocuments parses every YAML document of a file. kustomize's own kustomization.yaml is
// build configuration, not a cluster object, and is skipped; a GPUPolicy inside a rendered tree
// is an error since the tree must hold only its output.
func readDocuments(file string, data []byte) ([]*unstructured.Unstructured, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out []*unstructured.Unstructured
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", file, i, err)
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			return nil, fmt.Errorf("%s: document %d: %w", file, i, err)
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		switch {
		case u.GetKind() == "" || u.GetAPIVersion() == "":
			return nil, fmt.Errorf("%s: document %d has no apiVersion or kind: not a Kubernetes object", file, i)
		case u.GetKind() == "Kustomization" && strings.HasPrefix(u.GetAPIVersion(), "kustomize.config.k8s.io/"):
			continue
		case u.GetKind() == v1alpha1.Kind:
			return nil, fmt.Errorf("%s: document %d is a GPUPolicy inside a rendered tree: pass the policy file itself or only rendered output", file, i)
		}
		out = append(out, u)
	}
}
