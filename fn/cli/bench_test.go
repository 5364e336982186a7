package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
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

// BenchmarkFleetRender is `gpupolicy-fn fleet render` of generated fleets: examples/fleet's
// base, and per cluster one of its four overlays plus a namespace of the cluster's own, so no
// two clusters render alike (the render shared by identical clusters would flatter the
// figure). It covers reading the overlays, every cluster's validation and render, the audit
// reports and the one atomic write of the whole fleet.
func BenchmarkFleetRender(b *testing.B) {
	for _, n := range []int{10, 100} {
		b.Run(fmt.Sprintf("clusters=%d", n), func(b *testing.B) {
			dir := generateFleet(b, n)
			out := filepath.Join(b.TempDir(), "rendered")
			b.ReportAllocs()
			for b.Loop() {
				if code := FleetRender(context.Background(), []string{filepath.Join(dir, "clusters"), "-o", out}, io.Discard, io.Discard); code != 0 {
					b.Fatalf("fleet render exited %d", code)
				}
			}
		})
	}
}

// generateFleet writes a fleet of n clusters built from examples/fleet and returns its root.
func generateFleet(b *testing.B, n int) string {
	example := filepath.Join("..", "..", "examples", "fleet")
	root := b.TempDir()
	if err := os.CopyFS(filepath.Join(root, "base"), os.DirFS(filepath.Join(example, "base"))); err != nil {
		b.Fatal(err)
	}
	overlays := []string{"airgap", "dev", "prod-eu", "prod-us"}
	for i := range n {
		policy, err := os.ReadFile(filepath.Join(example, "clusters", overlays[i%4], "policy", "kustomization.yaml"))
		if err != nil {
			b.Fatal(err)
		}
		policy = fmt.Appendf(policy, `- patch: |
    apiVersion: gpupolicy.dev/v1alpha1
    kind: GPUPolicy
    metadata:
      name: fleet
    spec:
      namespace: gpu-%03d
`, i)
		if !bytes.Contains(policy, []byte("\npatches:\n")) {
			policy = bytes.Replace(policy, []byte("- patch: |"), []byte("patches:\n- patch: |"), 1)
		}
		dir := filepath.Join(root, "clusters", fmt.Sprintf("cluster-%03d", i))
		if err := os.MkdirAll(filepath.Join(dir, "policy"), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte("generators:\n- policy\n"), 0o644); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "policy", "kustomization.yaml"), policy, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	return root
}
