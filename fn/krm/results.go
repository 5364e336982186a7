package krm

import (
	"fmt"
	"strconv"
	"strings"

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

// result is one entry of the ResourceList's results, the KRM functions spec's fields in the
// order kpt writes them.
type result struct {
	Message     string       `yaml:"message,omitempty"`
	Severity    string       `yaml:"severity,omitempty"`
	ResourceRef *resourceRef `yaml:"resourceRef,omitempty"`
	Field       *field       `yaml:"field,omitempty"`
	File        *file        `yaml:"file,omitempty"`
}

type resourceRef struct {
	APIVersion string `yaml:"apiVersion,omitempty"`
	Kind       string `yaml:"kind,omitempty"`
	Name       string `yaml:"name,omitempty"`
	Namespace  string `yaml:"namespace,omitempty"`
}

type field struct {
	Path         string `yaml:"path,omitempty"`
	CurrentValue any    `yaml:"currentValue,omitempty"`
}

type file struct {
	Path  string `yaml:"path,omitempty"`
	Index int    `yaml:"index,omitempty"`
}

// Severities are the spec's words, which validate uses too.
const severityError = string(validate.SeverityError)

// String is the result as kpt prints it: [severity] apiVersion/kind/namespace/name field: message.
func (r *result) String() string {
	sev := r.Severity
	if sev == "" {
		sev = string(validate.SeverityInfo)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "[%s]", sev)
	if ref := r.ResourceRef; ref != nil {
		var id []string
		for _, s := range []string{ref.APIVersion, ref.Kind, ref.Namespace, ref.Name} {
			if s != "" {
				id = append(id, s)
			}
		}
		if len(id) > 0 {
			b.WriteString(" " + strings.Join(id, "/"))
		}
	}
	if r.Field != nil {
		b.WriteString(" " + r.Field.Path)
	}
	b.WriteString(": " + r.Message)
	return b.String()
}

// source says where the policy came from, for the resourceRef and file of its results.
type source struct {
	file  string
	index int
	ref   *resourceRef
}

// sourceOf describes a KRM input item from its identity and file annotations.
func sourceOf(obj object) source {
	src := source{ref: obj.ref(), file: obj.annotation(annotationPath)}
	if src.file == "" {
		src.file = obj.annotation(annotationLegacyPath)
	}
	src.index, _ = strconv.Atoi(obj.annotation(annotationIndex)) // an absent index stays 0
	return src
}

// results converts a policy's problems into KRM function results, in the order the CLI
// prints them (validate.Results.Sorted); the severities are the spec's own words.
func results(res validate.Results, src source) []*result {
	out := make([]*result, 0, len(res))
	for _, x := range res.Sorted() {
		r := &result{Severity: string(x.Severity), Message: x.Message}
		if src.ref != nil {
			rr := *src.ref
			r.ResourceRef = &rr
		}
		if x.Field != "" {
			r.Field = &field{Path: x.Field, CurrentValue: x.Value}
		}
		if src.file != "" {
			r.File = &file{Path: src.file, Index: src.index}
		}
		out = append(out, r)
	}
	return out
}
