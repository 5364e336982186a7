package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// kwokStageConfig reads each set's kustomization.yaml and concatenates only the files it
// lists; the test data kwok keeps next to its stages stays out.
func TestKwokStageConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(p, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("node/fast/kustomization.yaml", "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- node-initialize.yaml\n")
	write("node/fast/node-initialize.yaml", "kind: Stage\nmetadata: {name: node-initialize}\n")
	write("node/fast/testdata/in.yaml", "kind: Node\n")
	write("pod/fast/kustomization.yaml", "resources:\n- a.yaml\n- b.yaml\nnamePrefix: x\n")
	write("pod/fast/a.yaml", "kind: Stage\nmetadata: {name: a}\n")
	write("pod/fast/b.yaml", "kind: Stage\nmetadata: {name: b}\n")
	out := filepath.Join(dir, "out.yaml")
	if err := kwokStageConfig(dir, out, nil, "node/fast", "pod/fast"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	got := string(b)
	if n := strings.Count(got, "kind: Stage"); n != 3 || strings.Contains(got, "kind: Node") {
		t.Errorf("stage config:\n%s", got)
	}
	if err := kwokStageConfig(dir, out, nil, "node/missing"); err == nil {
		t.Error("missing stage set accepted")
	}
}
