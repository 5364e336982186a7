// Package krm is the GPUPolicy generator as a KRM function (the kustomize and kpt functions
// spec): a ResourceList on stdin, the same list with the rendered objects on stdout. The
// policy is the functionConfig (a kustomize generator, `kpt fn render` with configPath) or a
// GPUPolicy item (`kpt fn eval`); it never appears in the output. Every problem is a result
// with severity, field path, resourceRef and file; any error means exit 1 and no objects.
package krm

import (
	"errors"
	"fmt"
	"io"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	yaml "go.yaml.in/yaml/v3"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/fn/pipeline"
	"github.com/gpupolicy/gpupolicy/fn/validate"
)

// Run is the function's main: it reads a ResourceList from stdin and writes the result list
// to stdout, returning the exit code (1 when a result is an error or the input is unreadable).
func Run(stdin io.Reader, stdout, stderr io.Writer, opts validate.Options) int {
	in, err := io.ReadAll(stdin)
	if err != nil {
		fmt.Fprintf(stderr, "gpupolicy-fn: reading the ResourceList from stdin: %v\n", err)
		return 1
	}
	out, err := fn.Run(Processor(opts), in)
	if len(out) > 0 {
		if _, werr := stdout.Write(out); werr != nil {
			fmt.Fprintf(stderr, "gpupolicy-fn: writing the ResourceList: %v\n", werr)
			return 1
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "gpupolicy-fn: %v\n", err)
		return 1
	}
	return 0
}

// Processor renders the GPUPolicy of a ResourceList.
func Processor(opts validate.Options) fn.ResourceListProcessorFunc {
	return func(rl *fn.ResourceList) (bool, error) {
		policy, rest, problem := findPolicy(rl)
		if problem != nil {
			rl.Results = append(rl.Results, problem)
			rl.Items = nil
			return false, nil
		}
		var node yaml.Node
		if err := yaml.Unmarshal([]byte(policy.String()), &node); err != nil {
			return false, fmt.Errorf("re-reading the GPUPolicy: %w", err)
		}
		_, objs, res := pipeline.LoadNode(&node, opts)
		rl.Results = append(rl.Results, res.KRM(validate.SourceOf(policy))...)
		if res.HasErrors() {
			rl.Items = nil // no half output
			return false, nil
		}
		items := rest
		for _, o := range objs {
			y, err := o.YAML()
			if err != nil {
				return false, err
			}
			ko, err := fn.ParseKubeObject(y)
			if err != nil {
				return false, fmt.Errorf("%s: %w", o, err)
			}
			items = append(items, ko)
		}
		rl.Items = items
		return true, nil
	}
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
