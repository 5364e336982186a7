package doctor

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gpupolicy/gpupolicy/fn/source"
	"github.com/gpupolicy/gpupolicy/fn/validate"
)

// expectedFrom returns the rendered objects behind -f PATH: a directory of rendered YAML (as
// `gpupolicy-fn render -o DIR` writes it, Flux stage sub-directories included), a file of
// rendered objects, or a GPUPolicy file that the function's own pipeline renders, so doctor
// expects exactly what `gpupolicy-fn render` writes for the same file.
func expectedFrom(path string) *Expected {
	return &Expected{Source: "policy " + path, Objects: func(context.Context) ([]*unstructured.Unstructured, error) {
		in, err := source.Load(path, validate.Options{})
		if err != nil {
			// source's errors start with the file they are about; the flag in front says
			// which argument it came from.
			return nil, fmt.Errorf("-f %w", err)
		}
		return in.Objects, nil
	}}
}
