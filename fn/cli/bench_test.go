package cli

import (
	"context"
	"io"
	"path/filepath"
	"testing"
)

// BenchmarkRender is one `gpupolicy-fn render -f POLICY -o DIR` of the typical policy (the
// kustomize example) in process: decode, validate, render, the audit report, the atomic
// tree swap. examples.BenchmarkProcessRender measures the same as a process.
func BenchmarkRender(b *testing.B) {
	policy, err := filepath.Abs("../../examples/kustomize/gpupolicy.yaml")
	if err != nil {
		b.Fatal(err)
	}
	out := filepath.Join(b.TempDir(), "gpu")
	b.ReportAllocs()
	for b.Loop() {
		if code := Render(context.Background(), []string{"-f", policy, "-o", out}, io.Discard, io.Discard); code != 0 {
			b.Fatalf("render exited %d", code)
		}
	}
}
