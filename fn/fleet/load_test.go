package fleet

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// TestLoadRefusals: every way to name a fleet wrongly is an error that says what to give.
func TestLoadRefusals(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "one.yaml")
	if err := os.WriteFile(file, []byte("kind: ConfigMap\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	both := filepath.Join(dir, "both")
	for _, p := range []string{filepath.Join(both, "dev"), filepath.Join(dir, "empty")} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(both, "dev.yaml"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for spec, want := range map[string]string{
		file:                         "is a file: give the directory",
		filepath.Join(dir, "empty"):  "holds no cluster",
		both:                         "cluster dev is both dev.yaml and dev/",
		filepath.Join(dir, "absent"): "no such directory (a git revision is written REV:DIR",
		"no-such-rev-xyz:examples":   "git archive no-such-rev-xyz -- examples",
	} {
		if _, err := Load(spec); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Load(%s): %v, want an error containing %q", spec, err, want)
		}
	}
}

// TestLoadDirectory: files and render trees are clusters; dot entries are not.
func TestLoadDirectory(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"a.yaml", ".git/x", "b/kustomization.yaml", "notes.md"} {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := strings.Join(s.Names(), ","); got != "a,b" {
		t.Fatalf("clusters %s, want a,b", got)
	}
}

// TestMIGChangesFromNone: a cluster whose first MIG pool appears (no MIG ConfigMap before) or
// whose last one goes.
func TestMIGChangesFromNone(t *testing.T) {
	cm := &unstructured.Unstructured{Object: map[string]any{"kind": "ConfigMap", "metadata": map[string]any{"name": config.MIGConfigMap},
		"data": map[string]any{"training.yaml": "x"}}}
	for _, c := range []struct{ old, new []*unstructured.Unstructured }{{nil, []*unstructured.Unstructured{cm}}, {[]*unstructured.Unstructured{cm}, nil}} {
		if got := migChanges(c.old, c.new); len(got) != 1 || got[0] != "training" {
			t.Errorf("got %v, want [training]", got)
		}
	}
}
