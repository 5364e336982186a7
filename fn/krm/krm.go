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

	yaml "go.yaml.in/yaml/v3"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/fn/internal/yamlout"
	"github.com/gpupolicy/gpupolicy/fn/pipeline"
	"github.com/gpupolicy/gpupolicy/fn/render"
	"github.com/gpupolicy/gpupolicy/fn/validate"
)

// Run is the function's main: it reads a ResourceList from stdin and writes the result list
// to stdout, returning the exit code (1 when a result is an error or the input is unreadable).
//
// The list is encoded by yaml.v3 once with a placeholder for the rendered objects, whose
// text yamlout's Writer writes directly from their JSON form (see encode): node
// trees and yaml.v3's event emitter were most of the cost of a call. Items keep the input
// order followed by the rendered objects in stage order.
func Run(stdin io.Reader, stdout, stderr io.Writer, opts validate.Options) int {
	in, err := io.ReadAll(io.LimitReader(stdin, v1alpha1.MaxResourceListBytes+1))
	if err != nil {
		fmt.Fprintf(stderr, "gpupolicy-fn: reading the ResourceList from stdin: %v\n", err)
		return 1
	}
	if err := v1alpha1.CheckResourceListRead(in); err != nil {
		fmt.Fprintf(stderr, "gpupolicy-fn: %v\n", err)
		return 1
	}
	if err := v1alpha1.CheckText("the ResourceList on stdin", in); err != nil {
		fmt.Fprintf(stderr, "gpupolicy-fn: %v\n", err)
		return 1
	}
	rl, err := parseResourceList(in)
	if err != nil {
		fmt.Fprintf(stderr, "gpupolicy-fn: stdin is not a KRM ResourceList (run gpupolicy-fn --help): %v\n", err)
		return 1
	}
	items, objs, ok, err := process(rl, len(in), opts)
	if err != nil {
		fmt.Fprintf(stderr, "gpupolicy-fn: %v\n", err)
		return 1
	}
	out, err := encode(rl, items, objs)
	if err == nil {
		_, err = stdout.Write(out)
	}
	if err != nil {
		fmt.Fprintf(stderr, "gpupolicy-fn: writing the ResourceList: %v\n", err)
		return 1
	}
	if !ok {
		for _, r := range rl.out {
			if r.Severity == severityError {
				fmt.Fprintln(stderr, r.String())
			}
		}
		return 1
	}
	return 0
}

// process renders the one GPUPolicy of rl; its results go to rl.out. It returns the
// passed-through items and the rendered objects. ok is false when a result is an error: then
// both are empty (no half output).
func process(rl *resourceList, inputBytes int, opts validate.Options) (items []*yaml.Node, objs render.Objects, ok bool, err error) {
	policy, rest, problem := findPolicy(rl)
	if problem != nil {
		rl.out = append(rl.out, problem)
		return nil, nil, false, nil
	}
	// The policy is part of the input, so only a list over the limit can hold one over it;
	// then it is measured as text, as a policy file would be.
	if inputBytes > v1alpha1.MaxPolicyBytes {
		text, err := yamlout.Encode(policy.Node)
		if err != nil {
			return nil, nil, false, fmt.Errorf("measuring the GPUPolicy: %w", err)
		}
		if err := v1alpha1.CheckSize("the GPUPolicy", int64(len(text)), v1alpha1.MaxPolicyBytes); err != nil {
			rl.out = append(rl.out, &result{Severity: severityError, Message: err.Error(), ResourceRef: policy.ref()})
			return nil, nil, false, nil
		}
	}
	src := sourceOf(policy)
	fromLine(policy.Node)
	_, objs, res := pipeline.LoadNode(policy.Node, opts)
	rl.out = append(rl.out, results(res, src)...)
	if res.HasErrors() {
		return nil, nil, false, nil
	}
	items = make([]*yaml.Node, 0, len(rest)+1)
	for _, it := range rest {
		items = append(items, it.Node)
	}
	return items, objs, true, nil
}

// fileAnnotations say where kpt writes the object (the `render -o` tree); kustomize drops
// them from its output.
func fileAnnotations(o render.Object) map[string]string {
	return map[string]string{
		annotationPath:        o.Path(),
		annotationLegacyPath:  o.Path(),
		annotationIndex:       "0",
		annotationLegacyIndex: "0",
	}
}

// renderedMarker stands in for the rendered objects in the items while yaml.v3 writes the
// rest of the list; its line is then replaced by their text (render.Objects.AppendItems, the
// same bytes yaml.v3 would write for them, without building and encoding their node trees).
const renderedMarker = "gpupolicy-fn-rendered-objects-b9d1c0e7"

// encode writes the output ResourceList: items (passed through, then rendered), the
// functionConfig as received, results.
func encode(rl *resourceList, items []*yaml.Node, objs render.Objects) ([]byte, error) {
	if len(objs) > 0 {
		items = append(items, &yaml.Node{Kind: yaml.ScalarNode, Value: renderedMarker})
	}
	root := &yaml.Node{Kind: yaml.MappingNode}
	add := func(key string, v *yaml.Node) {
		root.Content = append(root.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: key}, v)
	}
	scalar := func(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Value: s} }
	add("apiVersion", scalar("config.kubernetes.io/v1"))
	add("kind", scalar("ResourceList"))
	add("items", &yaml.Node{Kind: yaml.SequenceNode, Content: items})
	if rl.functionConfig != nil {
		add("functionConfig", rl.functionConfig)
	}
	if len(rl.results)+len(rl.out) > 0 {
		seq := &yaml.Node{Kind: yaml.SequenceNode, Content: slices.Clip(rl.results)}
		for _, r := range rl.out {
			n := &yaml.Node{}
			if err := n.Encode(r); err != nil {
				return nil, err
			}
			seq.Content = append(seq.Content, n)
		}
		add("results", seq)
	}
	text, err := yamlout.Encode(root)
	if err != nil {
		return nil, err
	}
	if len(objs) == 0 {
		return text, nil
	}
	line := []byte("\n- " + renderedMarker + "\n")
	at := bytes.Index(text, line)
	if at < 0 || bytes.Contains(text[at+1:], line) {
		return nil, fmt.Errorf("internal error: the placeholder of the rendered objects is not in the output exactly once")
	}
	out := make([]byte, 0, len(text)+8192*len(objs))
	out = append(out, text[:at+1]...)
	out, err = objs.AppendItems(out, fileAnnotations)
	if err != nil {
		return nil, err
	}
	return append(out, text[at+len(line):]...), nil
}

// findPolicy returns the one GPUPolicy (functionConfig or item) and the other items.
func findPolicy(rl *resourceList) (object, []object, *result) {
	var found []object
	var rest []object
	var fc object
	if rl.functionConfig != nil {
		fc = object{rl.functionConfig}
	}
	if fc.Node != nil && fc.kind() != "" {
		switch {
		case fc.kind() == v1alpha1.Kind && !isPolicy(fc):
			return object{}, nil, &result{Severity: severityError, Message: fmt.Sprintf(
				"the functionConfig %s %q has apiVersion %s (group %q), not group %s: write apiVersion: %s",
				fc.kind(), fc.name(), fc.apiVersion(), fc.group(), v1alpha1.Group, v1alpha1.APIVersion),
				ResourceRef: fc.ref()}
		case !isPolicy(fc):
			return object{}, nil, &result{Severity: severityError, Message: fmt.Sprintf(
				"the functionConfig is a %s %q (apiVersion %s), not a %s (apiVersion %s): point the generator (kustomize) or configPath (kpt) at a GPUPolicy file",
				fc.kind(), fc.name(), fc.apiVersion(), v1alpha1.Kind, v1alpha1.APIVersion),
				ResourceRef: fc.ref()}
		}
		found = append(found, fc)
	}
	for _, n := range rl.items {
		it := object{n}
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
		return object{}, nil, &result{Severity: severityError, Message: errNoPolicy.Error()}
	case 1:
		return found[0], rest, nil
	}
	return object{}, nil, &result{Severity: severityError, ResourceRef: found[1].ref(), Message: fmt.Sprintf(
		"found %d GPUPolicy objects (%s and %s): one function call renders one policy; give each its own generator",
		len(found), found[0].name(), found[1].name())}
}

var errNoPolicy = errors.New("no GPUPolicy found: give it as the functionConfig (kustomize generators: [policy.yaml]; kpt: configPath) or as an input item (apiVersion: " + v1alpha1.APIVersion + ", kind: " + v1alpha1.Kind + ")")

// isPolicy matches the kind in the gpupolicy.dev group at any version, so a wrong version is
// reported by the decoder with the version to write instead of being passed through.
func isPolicy(o object) bool {
	return o.kind() == v1alpha1.Kind && o.group() == v1alpha1.Group
}

func sameObject(a, b object) bool {
	return a.apiVersion() == b.apiVersion() && a.kind() == b.kind() &&
		a.name() == b.name() && a.namespace() == b.namespace()
}
