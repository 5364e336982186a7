// Package manifestcheck holds rendered output to the standard the project promises: every
// object decodes strictly (unknown or misspelled fields, duplicate keys and wrong types are
// errors) into its k8s.io/api type through client-go's scheme, the same codec kubectl and the
// API server use; and the containerd drop-in is TOML of the config version its containerd reads.
// It is test support: the tests of policies/ and examples/ use it on every committed tree
// (hence outside an internal/ directory); no program imports it.
package manifestcheck

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

// crdKinds are the kinds the output may hold that k8s.io/api has no type for. They are checked
// for well-formed YAML without duplicate keys and a name; their schemas belong to their projects.
var crdKinds = map[schema.GroupVersionKind]bool{
	{Group: "monitoring.coreos.com", Version: "v1", Kind: "ServiceMonitor"}:       true,
	{Group: "monitoring.coreos.com", Version: "v1", Kind: "PrometheusRule"}:       true,
	{Group: "kustomize.toolkit.fluxcd.io", Version: "v1", Kind: "Kustomization"}:  true,
	{Group: "kustomize.config.k8s.io", Version: "v1beta1", Kind: "Kustomization"}: true,
	{Group: "source.toolkit.fluxcd.io", Version: "v1", Kind: "GitRepository"}:     true,
	{Group: "argoproj.io", Version: "v1alpha1", Kind: "Application"}:              true,
}

var strictCodec = kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme.Scheme, scheme.Scheme,
	kjson.SerializerOptions{Yaml: true, Strict: true})

// Object is one decoded document: Typed is the k8s.io/api object, or nil for a CRD kind.
type Object struct {
	GVK   schema.GroupVersionKind
	Name  string
	Typed runtime.Object
	Raw   *unstructured.Unstructured
}

// Split returns the non-empty YAML documents of a stream, cut at "---" lines.
func Split(stream []byte) [][]byte {
	var docs [][]byte
	var cur [][]byte
	flush := func() {
		doc := bytes.Join(cur, []byte("\n"))
		if len(bytes.TrimSpace(stripComments(doc))) > 0 {
			docs = append(docs, append(doc, '\n'))
		}
		cur = nil
	}
	for _, l := range bytes.Split(stream, []byte("\n")) {
		if t := bytes.TrimRight(l, " \t\r"); bytes.Equal(t, []byte("---")) || bytes.HasPrefix(t, []byte("--- ")) {
			flush()
			continue
		}
		cur = append(cur, l)
	}
	flush()
	return docs
}

// Decode strictly decodes one document.
func Decode(doc []byte) (Object, error) {
	// YAMLToJSONStrict rejects duplicate keys, which a plain YAML decode silently collapses.
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return Object{}, fmt.Errorf("YAML: %w", err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(js); err != nil {
		return Object{}, fmt.Errorf("not a Kubernetes object: %w", err)
	}
	o := Object{GVK: u.GroupVersionKind(), Name: u.GetName(), Raw: u}
	id := fmt.Sprintf("%s %q", o.GVK.Kind, o.Name)
	if o.Name == "" {
		return o, fmt.Errorf("%s: metadata.name is empty", o.GVK)
	}
	if crdKinds[o.GVK] {
		return o, nil
	}
	obj, _, err := strictCodec.Decode(js, nil, nil)
	if err != nil {
		if runtime.IsNotRegisteredError(err) {
			return o, fmt.Errorf("%s: %s is neither a k8s.io/api kind nor a known CRD kind", id, o.GVK)
		}
		return o, fmt.Errorf("%s: strict decoding: %w", id, err)
	}
	o.Typed = obj
	return o, nil
}

// DecodeAll strictly decodes every document of a stream; errs has one entry per bad document.
func DecodeAll(stream []byte) ([]Object, []error) {
	docs := Split(stream)
	var objs []Object
	var errs []error
	for i, d := range docs {
		o, err := Decode(d)
		if err != nil {
			errs = append(errs, fmt.Errorf("document %d: %w", i+1, err))
			continue
		}
		objs = append(objs, o)
	}
	return objs, errs
}

func stripComments(doc []byte) []byte {
	var out [][]byte
	for _, l := range bytes.Split(doc, []byte("\n")) {
		if t := bytes.TrimSpace(l); len(t) > 0 && t[0] != '#' {
			out = append(out, l)
		}
	}
	return bytes.Join(out, []byte("\n"))
}

// DecodeTree strictly decodes every object in the *.yaml files under dir (a rendered tree or a
// directory of streams), or in the files matching dir when it is a glob pattern.
// kustomization.yaml files are kustomize's configuration, not objects, and are skipped. Each
// error names its file.
func DecodeTree(dir string) ([]Object, []error) {
	var files []string
	var errs []error
	if strings.ContainsAny(dir, "*?[") {
		var err error
		if files, err = filepath.Glob(dir); err != nil {
			return nil, []error{err}
		}
	} else if err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, p)
		}
		return err
	}); err != nil {
		errs = append(errs, err)
	}
	var objs []Object
	for _, p := range files {
		if filepath.Ext(p) != ".yaml" || filepath.Base(p) == "kustomization.yaml" {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		o, es := DecodeAll(b)
		objs = append(objs, o...)
		for _, e := range es {
			errs = append(errs, fmt.Errorf("%s: %w", p, e))
		}
	}
	if len(objs) == 0 && len(errs) == 0 {
		errs = append(errs, fmt.Errorf("%s: no objects", dir))
	}
	return objs, errs
}
