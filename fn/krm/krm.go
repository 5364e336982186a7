// Package krm is the GPUPolicy generator as a KRM function (the kustomize and kpt functions
// spec): a ResourceList on stdin, the same list with the rendered objects on stdout. The
// policy is the functionConfig (a kustomize generator, `kpt fn render` with configPath) or a
// GPUPolicy item (`kpt fn eval`); it never appears in the output. Every problem is a result
// with severity, field path, resourceRef and file; any error means exit 1 and no objects.
package krm

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	yaml "go.yaml.in/yaml/v3"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/fn/pipeline"
	"github.com/gpupolicy/gpupolicy/fn/validate"
)

// Run is the function's main: it reads a ResourceList from stdin and writes the result list
// to stdout, returning the exit code (1 when a result is an error or the input is unreadable).
//
// The output is assembled as one YAML node tree and encoded once: the rendered objects go
// from their JSON form straight into nodes, never through text and back, which is most of
// the cost of a call. Items keep the input order followed by the rendered objects in stage
// order.
func Run(stdin io.Reader, stdout, stderr io.Writer, opts validate.Options) int {
	in, err := io.ReadAll(stdin)
	if err != nil {
		fmt.Fprintf(stderr, "gpupolicy-fn: reading the ResourceList from stdin: %v\n", err)
		return 1
	}
	rl, err := fn.ParseResourceList(in)
	if err != nil {
		fmt.Fprintf(stderr, "gpupolicy-fn: stdin is not a KRM ResourceList (run gpupolicy-fn --help): %v\n", err)
		return 1
	}
	items, ok, err := process(rl, opts)
	if err != nil {
		fmt.Fprintf(stderr, "gpupolicy-fn: %v\n", err)
		return 1
	}
	out, err := encode(rl, items)
	if err == nil {
		_, err = stdout.Write(out)
	}
	if err != nil {
		fmt.Fprintf(stderr, "gpupolicy-fn: writing the ResourceList: %v\n", err)
		return 1
	}
	if !ok {
		for _, r := range rl.Results {
			if r.Severity == fn.Error {
				fmt.Fprintln(stderr, r.String())
			}
		}
		return 1
	}
	return 0
}

// process renders the one GPUPolicy of rl into the output items; results go to rl.Results.
// ok is false when a result is an error: then items is empty (no half output).
func process(rl *fn.ResourceList, opts validate.Options) (items []*yaml.Node, ok bool, err error) {
	policy, rest, problem := findPolicy(rl)
	if problem != nil {
		rl.Results = append(rl.Results, problem)
		return nil, false, nil
	}
	var node yaml.Node
	if err := yaml.Unmarshal([]byte(policy.String()), &node); err != nil {
		return nil, false, fmt.Errorf("re-reading the GPUPolicy: %w", err)
	}
	_, objs, res := pipeline.LoadNode(&node, opts)
	rl.Results = append(rl.Results, res.KRM(validate.SourceOf(policy))...)
	if res.HasErrors() {
		return nil, false, nil
	}
	items = make([]*yaml.Node, 0, len(rest)+len(objs))
	for _, it := range rest {
		n, err := objectNode(it.String())
		if err != nil {
			return nil, false, fmt.Errorf("item %s: %w", it.ShortString(), err)
		}
		items = append(items, n)
	}
	for _, o := range objs {
		n, err := o.Node()
		if err != nil {
			return nil, false, err
		}
		// Where kpt writes the object (the `render -o` tree); kustomize drops these
		// annotations from its output.
		setAnnotations(n, map[string]string{
			annotationPath:       o.Path(),
			annotationLegacyPath: o.Path(),
			annotationIndex:      "0",
			annotationLegacyIdx:  "0",
		})
		items = append(items, n)
	}
	return items, true, nil
}

// Annotations of the KRM functions spec that say which file an item lives in (the legacy
// names are still read by kpt and kustomize; both must agree when both are set).
const (
	annotationPath       = "internal.config.kubernetes.io/path"
	annotationIndex      = "internal.config.kubernetes.io/index"
	annotationLegacyPath = "config.kubernetes.io/path"
	annotationLegacyIdx  = "config.kubernetes.io/index"
)

// setAnnotations adds annotations to an object node, keeping the keys sorted.
func setAnnotations(obj *yaml.Node, kv map[string]string) {
	meta := mappingChild(obj, "metadata")
	ann := mappingChild(meta, "annotations")
	for k, v := range kv {
		ann.Content = append(ann.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k},
			&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: v})
	}
	pairs := make([][2]*yaml.Node, 0, len(ann.Content)/2)
	for i := 0; i+1 < len(ann.Content); i += 2 {
		pairs = append(pairs, [2]*yaml.Node{ann.Content[i], ann.Content[i+1]})
	}
	slices.SortStableFunc(pairs, func(a, b [2]*yaml.Node) int { return strings.Compare(a[0].Value, b[0].Value) })
	ann.Content = ann.Content[:0]
	for _, p := range pairs {
		ann.Content = append(ann.Content, p[0], p[1])
	}
}

// mappingChild returns the mapping under key in m, adding an empty one if absent.
func mappingChild(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	child := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, child)
	return child
}

// objectNode parses a passed-through item, keeping its comments.
func objectNode(text string) (*yaml.Node, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(text), &doc); err != nil {
		return nil, err
	}
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		return doc.Content[0], nil
	}
	return &doc, nil
}

// encode writes the output ResourceList: items, the functionConfig as received, results.
func encode(rl *fn.ResourceList, items []*yaml.Node) ([]byte, error) {
	root := &yaml.Node{Kind: yaml.MappingNode}
	add := func(key string, v *yaml.Node) {
		root.Content = append(root.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: key}, v)
	}
	scalar := func(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Value: s} }
	add("apiVersion", scalar("config.kubernetes.io/v1"))
	add("kind", scalar("ResourceList"))
	add("items", &yaml.Node{Kind: yaml.SequenceNode, Content: items})
	if fc := rl.FunctionConfig; fc != nil && !fc.IsEmpty() {
		n, err := objectNode(fc.String())
		if err != nil {
			return nil, fmt.Errorf("functionConfig: %w", err)
		}
		add("functionConfig", n)
	}
	if len(rl.Results) > 0 {
		n := &yaml.Node{}
		if err := n.Encode(rl.Results); err != nil {
			return nil, err
		}
		add("results", n)
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	enc.CompactSeqIndent()
	if err := enc.Encode(root); err != nil {
		return nil, err
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// findPolicy returns the one GPUPolicy (functionConfig or item) and the other items.
func findPolicy(rl *fn.ResourceList) (*fn.KubeObject, fn.KubeObjects, *fn.Result) {
	var found []*fn.KubeObject
	var rest fn.KubeObjects
	fc := rl.FunctionConfig
	if fc != nil && fc.GetKind() != "" {
		if !isPolicy(fc) {
			return nil, nil, &fn.Result{Severity: fn.Error, Message: fmt.Sprintf(
				"the functionConfig is a %s %q, not a %s: point the generator (kustomize) or configPath (kpt) at a GPUPolicy file",
				fc.GetKind(), fc.GetName(), v1alpha1.Kind),
				ResourceRef: ref(fc)}
		}
		found = append(found, fc)
	}
	for _, it := range rl.Items {
		switch {
		case !isPolicy(it):
			rest = append(rest, it)
		case len(found) > 0 && found[0] == fc && sameObject(fc, it):
			// kustomize hands a generator's config to the function twice: as the
			// functionConfig and as an item. It is one policy, and it is dropped from the output.
		default:
			found = append(found, it)
		}
	}
	switch len(found) {
	case 0:
		return nil, nil, &fn.Result{Severity: fn.Error, Message: errNoPolicy.Error()}
	case 1:
		return found[0], rest, nil
	}
	return nil, nil, &fn.Result{Severity: fn.Error, ResourceRef: ref(found[1]), Message: fmt.Sprintf(
		"found %d GPUPolicy objects (%s and %s): one function call renders one policy; give each its own generator",
		len(found), found[0].GetName(), found[1].GetName())}
}

var errNoPolicy = errors.New("no GPUPolicy found: give it as the functionConfig (kustomize generators: [policy.yaml]; kpt: configPath) or as an input item (apiVersion: " + v1alpha1.APIVersion + ", kind: " + v1alpha1.Kind + ")")

// isPolicy matches the kind in the gpupolicy.dev group at any version, so a wrong version is
// reported by the decoder with the version to write instead of being passed through.
func isPolicy(o *fn.KubeObject) bool {
	return o.GetKind() == v1alpha1.Kind && o.GroupKind().Group == v1alpha1.Group
}

func sameObject(a, b *fn.KubeObject) bool {
	return a.GetAPIVersion() == b.GetAPIVersion() && a.GetKind() == b.GetKind() &&
		a.GetName() == b.GetName() && a.GetNamespace() == b.GetNamespace()
}

func ref(o *fn.KubeObject) *fn.ResourceRef {
	return &fn.ResourceRef{APIVersion: o.GetAPIVersion(), Kind: o.GetKind(), Name: o.GetName(), Namespace: o.GetNamespace()}
}
