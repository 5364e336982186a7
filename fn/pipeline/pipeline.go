// Package pipeline is the one way from a policy document to rendered objects: decode strictly
// (fn/api/v1alpha1) → record what the document sets → default → validate (fn/validate) →
// render (fn/render, which orders). The KRM function, the render CLI and the audit, diff and
// doctor commands all go through it, so they can never disagree about what a policy means.
// Decoding and rendering problems become the same results as validation problems (results.go).
package pipeline

import (
	"context"
	"errors"
	"fmt"

	yaml "go.yaml.in/yaml/v3"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/fn/render"
	"github.com/gpupolicy/gpupolicy/fn/validate"
)

// Load decodes, defaults, validates and renders one policy file. objs is nil whenever the
// results hold an error: there is never half an output. The policy is nil when it could not
// be decoded.
func Load(data []byte, opts validate.Options) (*v1alpha1.GPUPolicy, render.Objects, validate.Results) {
	return LoadContext(context.Background(), data, opts)
}

// LoadContext is Load that stops once ctx is done (a signal to `gpupolicy-fn render`): the
// results then hold one error, ErrInterrupted's text, and there are no objects.
func LoadContext(ctx context.Context, data []byte, opts validate.Options) (*v1alpha1.GPUPolicy, render.Objects, validate.Results) {
	p, res := Validate(data, opts)
	if err := ctx.Err(); err != nil {
		return p, nil, append(res, interrupted(err)...)
	}
	return rendered(ctx, p, res)
}

// ErrInterrupted is why a call whose context was cancelled returned no objects.
var ErrInterrupted = errors.New("interrupted")

func interrupted(err error) validate.Results {
	return validate.Results{{Severity: validate.SeverityError, Message: fmt.Sprintf("%v (%v): nothing was rendered", ErrInterrupted, err)}}
}

// LoadNode is Load for a parsed document (a KRM function's functionConfig or item).
func LoadNode(n *yaml.Node, opts validate.Options) (*v1alpha1.GPUPolicy, render.Objects, validate.Results) {
	p, err := v1alpha1.DecodeNode(n)
	p, res := checked(p, err, opts)
	return rendered(context.Background(), p, res)
}

// Validate is Load without rendering: decode, default, validate. On decoding errors the
// policy is nil; otherwise it is defaulted, and it may be rendered only when the results hold
// no error.
func Validate(data []byte, opts validate.Options) (*v1alpha1.GPUPolicy, validate.Results) {
	p, err := v1alpha1.Decode(data)
	return checked(p, err, opts)
}

func checked(p *v1alpha1.GPUPolicy, err error, opts validate.Options) (*v1alpha1.GPUPolicy, validate.Results) {
	if err != nil {
		return nil, decodeResults(err)
	}
	// Defaulting copies spec.devicePlugin into every node pool; a pool is validated on what it
	// wrote, so that is recorded first.
	written := validate.WrittenOf(p)
	v1alpha1.Default(p)
	return p, validate.Policy(p, written, opts)
}

func rendered(ctx context.Context, p *v1alpha1.GPUPolicy, res validate.Results) (*v1alpha1.GPUPolicy, render.Objects, validate.Results) {
	if p == nil || res.HasErrors() {
		return p, nil, res
	}
	objs, err := render.RenderContext(ctx, p)
	if ctx.Err() != nil {
		return p, nil, append(res, interrupted(ctx.Err())...)
	}
	if err != nil {
		return p, nil, append(res, renderResults(err)...)
	}
	return p, objs, res
}
