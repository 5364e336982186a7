package validate_test

import (
	"testing"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/fn/validate"
)

// BenchmarkPolicy is validation alone, on an already decoded and defaulted policy
// (fn/pipeline's BenchmarkValidate adds decoding and defaulting).
func BenchmarkPolicy(b *testing.B) {
	p, err := v1alpha1.Decode([]byte(base))
	if err != nil {
		b.Fatal(err)
	}
	written := validate.WrittenOf(p)
	v1alpha1.Default(p)
	b.ReportAllocs()
	for b.Loop() {
		validate.Policy(p, written, validate.Options{Now: today})
	}
}
