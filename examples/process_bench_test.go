package examples

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// typicalPolicy is the policy a process benchmark renders: the kustomize example (one node
// pool, every stage on).
const typicalPolicy = kustomizeDir + "/gpupolicy.yaml"

// BenchmarkProcessKRM is the cost of one exec-function call as kustomize or kpt makes it: start
// bin/gpupolicy-fn, read a ResourceList on stdin, write the rendered one on stdout. Target
// ≤ 10 ms per process for a typical policy.
func BenchmarkProcessKRM(b *testing.B) {
	fn := gpupolicyFn(b)
	policy, err := os.ReadFile(typicalPolicy)
	if err != nil {
		b.Fatal(err)
	}
	var in bytes.Buffer
	in.WriteString("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\nfunctionConfig:\n")
	for _, l := range bytes.Split(bytes.TrimRight(policy, "\n"), []byte("\n")) {
		in.WriteString("  ")
		in.Write(l)
		in.WriteByte('\n')
	}
	b.ReportAllocs()
	for b.Loop() {
		cmd := exec.Command(fn)
		cmd.Stdin = bytes.NewReader(in.Bytes())
		var out bytes.Buffer
		cmd.Stdout = &out
		if err := cmd.Run(); err != nil {
			b.Fatalf("gpupolicy-fn: %v", err)
		}
		if out.Len() == 0 {
			b.Fatal("no output")
		}
	}
}

// BenchmarkProcessRender is one `gpupolicy-fn render -f POLICY -o DIR`: start, render, write
// the tree atomically.
func BenchmarkProcessRender(b *testing.B) {
	fn := gpupolicyFn(b)
	out := filepath.Join(b.TempDir(), "gpu")
	b.ReportAllocs()
	for b.Loop() {
		if o, err := exec.Command(fn, "render", "-f", typicalPolicy, "-o", out).CombinedOutput(); err != nil {
			b.Fatalf("gpupolicy-fn render: %v\n%s", err, o)
		}
	}
}

// BenchmarkKustomizeBuild is the whole `kustomize build --enable-alpha-plugins --enable-exec
// examples/kustomize`: kustomize's own start and work plus one function process.
func BenchmarkKustomizeBuild(b *testing.B) {
	kz := kustomize(b)
	dst := stageKustomizeExample(b)
	b.ReportAllocs()
	for b.Loop() {
		if o, err := exec.Command(kz, "build", "--enable-alpha-plugins", "--enable-exec", dst).CombinedOutput(); err != nil {
			b.Fatalf("kustomize build: %v\n%s", err, o)
		}
	}
}
