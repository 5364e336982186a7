package examples

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/fn/testing/goldentree"
	"github.com/gpupolicy/gpupolicy/fn/testing/manifestcheck"
)

var update = flag.Bool("update", false, "rewrite examples/rendered and examples/flux/gpu")

const (
	kustomizeDir  = "kustomize"
	renderedFile  = "rendered/gpu-stack.yaml"
	fluxPolicy    = "flux/gpupolicy.yaml"
	fluxTree      = "flux/gpu"
	fluxTreeInGit = "examples/flux/gpu" // the tree's path from the repository root
)

// stageKustomizeExample copies examples/kustomize into a temporary tree laid out like the
// repository (examples/kustomize next to bin/gpupolicy-fn, the binary built from this
// checkout), so the committed relative exec path is what runs. It returns the copy's path.
func stageKustomizeExample(tb testing.TB) string {
	tb.Helper()
	fn := gpupolicyFn(tb)
	tmp := tb.TempDir()
	dst := filepath.Join(tmp, "examples", "kustomize")
	if err := os.CopyFS(dst, os.DirFS(kustomizeDir)); err != nil {
		tb.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(tmp, "bin"), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.Symlink(fn, filepath.Join(tmp, "bin", "gpupolicy-fn")); err != nil {
		tb.Fatal(err)
	}
	return dst
}

// kustomizeBuild runs real kustomize in exec mode on the staged example; the working
// directory is elsewhere on purpose.
func kustomizeBuild(t *testing.T) []byte {
	t.Helper()
	kz := kustomize(t)
	cmd := exec.Command(kz, "build", "--enable-alpha-plugins", "--enable-exec", stageKustomizeExample(t))
	cmd.Dir = t.TempDir()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kustomize build --enable-alpha-plugins --enable-exec examples/kustomize: %v\n%s", err, stderr.String())
	}
	return stdout.Bytes()
}

// fluxRender runs `gpupolicy-fn render` the way examples/flux/gpupolicy.yaml documents it and
// returns the tree.
func fluxRender(t *testing.T) map[string][]byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), "gpu")
	cmd := exec.Command(gpupolicyFn(t), "render", "-f", fluxPolicy, "-o", out, "--flux-path", fluxTreeInGit)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gpupolicy-fn render: %v\n%s", err, b)
	}
	files, err := goldentree.Read(out)
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestRenderedUpToDate fails when the committed output of an example is stale; `make
// check-rendered` runs it in CI. Regenerate with `go test ./examples -run TestRenderedUpToDate -update`.
func TestRenderedUpToDate(t *testing.T) {
	t.Run("kustomize", func(t *testing.T) {
		goldentree.File(t, renderedFile, kustomizeBuild(t), *update)
	})
	t.Run("flux", func(t *testing.T) {
		goldentree.Tree(t, fluxTree, fluxRender(t), *update)
	})
}

// TestKustomizeOutputDeterministic: two kustomize builds are byte-identical.
func TestKustomizeOutputDeterministic(t *testing.T) {
	if a, b := kustomizeBuild(t), kustomizeBuild(t); !bytes.Equal(a, b) {
		t.Fatalf("two kustomize builds differ: %s", goldentree.FirstDiff(a, b))
	}
}

// TestRenderedObjectsStrict decodes every committed object of the examples strictly into its
// k8s.io/api type, and checks each tree's containerd drop-in against its policy.
func TestRenderedObjectsStrict(t *testing.T) {
	for _, c := range []struct{ dir, policy string }{
		{"rendered", filepath.Join(kustomizeDir, "gpupolicy.yaml")},
		{fluxTree, fluxPolicy},
		// The Argo CD and Flux set-up objects; argocd/gpu-stack holds a policy, not objects.
		{"argocd/*.yaml", ""},
		{"flux/sync", ""},
	} {
		t.Run(c.dir, func(t *testing.T) {
			objs, errs := manifestcheck.DecodeTree(c.dir)
			for _, err := range errs {
				t.Error(err)
			}
			if c.policy == "" {
				return
			}
			data, err := os.ReadFile(c.policy)
			if err != nil {
				t.Fatal(err)
			}
			p, err := v1alpha1.Decode(data)
			if err != nil {
				t.Fatal(err)
			}
			v1alpha1.Default(p)
			if err := manifestcheck.CheckDropIn(objs, p.Spec.ContainerRuntime.Version, p.Spec.Toolkit.RuntimeClassName); err != nil {
				t.Error(err)
			}
		})
	}
}
