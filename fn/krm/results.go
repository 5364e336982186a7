package krm

import (
	"fmt"

	"github.com/kptdev/krm-functions-sdk/go/fn"

	"github.com/gpupolicy/gpupolicy/fn/validate"
)

// Annotations of the KRM functions spec that say which file an item lives in: kustomize and
// kpt set them on a function's input, and the function sets them on the objects it adds. The
// legacy names are still read by both; they must agree when both are set.
const (
	annotationPath        = "internal.config.kubernetes.io/path"
	annotationIndex       = "internal.config.kubernetes.io/index"
	annotationLegacyPath  = "config.kubernetes.io/path"
	annotationLegacyIndex = "config.kubernetes.io/index"
)

// source says where the policy came from, for the resourceRef and file of its results.
type source struct {
	file  string
	index int
	ref   *fn.ResourceRef
}

// sourceOf describes a KRM input item from its identity and file annotations.
func sourceOf(obj *fn.KubeObject) source {
	src := source{ref: ref(obj), file: obj.GetAnnotation(annotationPath)}
	if src.file == "" {
		src.file = obj.GetAnnotation(annotationLegacyPath)
	}
	fmt.Sscan(obj.GetAnnotation(annotationIndex), &src.index) //nolint:errcheck // absent index stays 0
	return src
}

// results converts a policy's problems into KRM function results, in the order the CLI
// prints them (validate.Results.Sorted); the severities are the spec's own words.
func results(res validate.Results, src source) fn.Results {
	out := make(fn.Results, 0, len(res))
	for _, x := range res.Sorted() {
		r := &fn.Result{Severity: fn.Severity(x.Severity), Message: x.Message}
		if src.ref != nil {
			rr := *src.ref
			r.ResourceRef = &rr
		}
		if x.Field != "" {
			r.Field = &fn.Field{Path: x.Field, CurrentValue: x.Value}
		}
		if src.file != "" {
			r.File = &fn.File{Path: src.file, Index: src.index}
		}
		out = append(out, r)
	}
	return out
}

func ref(o *fn.KubeObject) *fn.ResourceRef {
	return &fn.ResourceRef{APIVersion: o.GetAPIVersion(), Kind: o.GetKind(), Name: o.GetName(), Namespace: o.GetNamespace()}
}
