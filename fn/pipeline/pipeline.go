// Package pipeline is the one way from a policy document to rendered objects:
// decode strictly → default → validate → render (which orders). The KRM function, the render
// CLI and the audit, diff and doctor commands all go through it, so they can never disagree
// about what a policy means.
package pipeline

import (
	"errors"

	yaml "go.yaml.in/yaml/v3"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/fn/render"
	"github.com/gpupolicy/gpupolicy/fn/validate"
)

// Load decodes, defaults, validates and renders one policy file. objs is nil whenever the
// results hold an error: there is never half an output. The policy is nil when it could not
// be decoded.
func Load(data []byte, opts validate.Options) (*v1alpha1.GPUPolicy, render.Objects, validate.Results) {
	p, res := validate.Load(data, opts)
	return finish(p, res)
}

// LoadNode is Load for a parsed document (a KRM function's functionConfig or item).
func LoadNode(n *yaml.Node, opts validate.Options) (*v1alpha1.GPUPolicy, render.Objects, validate.Results) {
	p, res := validate.LoadNode(n, opts)
	return finish(p, res)
}

// Render renders a decoded policy: default, validate, render. It is Load for callers that
// built the policy in Go.
func Render(p *v1alpha1.GPUPolicy, opts validate.Options) (render.Objects, validate.Results) {
	v1alpha1.Default(p)
	_, objs, res := finish(p, validate.Policy(p, opts))
	return objs, res
}

func finish(p *v1alpha1.GPUPolicy, res validate.Results) (*v1alpha1.GPUPolicy, render.Objects, validate.Results) {
	if p == nil || res.HasErrors() {
		return p, nil, res
	}
	objs, err := render.Render(p)
	if err != nil {
		return p, nil, append(res, renderResults(err)...)
	}
	return p, objs, res
}

// renderResults words the few problems only rendering finds as validation results.
func renderResults(err error) validate.Results {
	var fe v1alpha1.FieldErrors
	if !errors.As(err, &fe) {
		return validate.Results{{Severity: validate.SeverityError, Message: err.Error()}}
	}
	out := make(validate.Results, 0, len(fe))
	for _, e := range fe {
		out = append(out, validate.Result{Severity: validate.SeverityError, Field: e.Field, Value: e.BadValue, Message: e.Detail})
	}
	return out
}
