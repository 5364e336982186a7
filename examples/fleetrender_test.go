package examples

import (
	"bytes"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// readTree reads every file under dir (slash path → bytes).
func readTree(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out[filepath.ToSlash(rel)], err = os.ReadFile(p)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// runFn runs gpupolicy-fn in dir and fails the test on a non-zero exit or any stderr.
func runFn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(gpupolicyFn(t), args...)
	cmd.Dir = dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil || stderr.Len() > 0 {
		t.Fatalf("gpupolicy-fn %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

// TestFleetRender holds `fleet render` to the two things it promises, on examples/fleet plus
// a Flux cluster: each OUT/<cluster>/ is byte for byte the tree `gpupolicy-fn render` writes
// from the GPUPolicy real kustomize builds of that cluster's policy overlay, and the objects
// are the ones kustomize's own build of the cluster (the committed rendered/<cluster>.yaml)
// holds, which fleet diff confirms. A second run writes the same bytes.
func TestFleetRender(t *testing.T) {
	fleet := stageFleet(t)
	// A fifth cluster on Flux, so the per-cluster Flux paths are checked too.
	flux := filepath.Join(fleet, "clusters", "flux-lab")
	for name, content := range map[string]string{
		"kustomization.yaml": "generators:\n- policy\n",
		"policy/kustomization.yaml": `resources:
- ../../../base
patches:
- target: {kind: GPUPolicy}
  patch: |
    - op: replace
      path: /spec/gitops
      value: flux
`,
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(flux, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(flux, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	repo := filepath.Dir(filepath.Dir(fleet)) // the staged repository root
	runFn(t, repo, "fleet", "render", "examples/fleet/clusters", "-o", "examples/fleet/trees")
	got := readTree(t, filepath.Join(fleet, "trees"))

	clusters := append(slices.Clone(fleetClusters), "flux-lab")
	for _, c := range clusters {
		policy, err := exec.Command(kustomize(t), "build", filepath.Join(fleet, "clusters", c, "policy")).Output()
		if err != nil {
			t.Fatalf("kustomize build %s/policy: %v", c, err)
		}
		pf := filepath.Join(t.TempDir(), "policy.yaml")
		if err := os.WriteFile(pf, policy, 0o644); err != nil {
			t.Fatal(err)
		}
		alone := filepath.Join(repo, "alone", c)
		args := []string{"render", "-f", pf, "-o", alone}
		if c == "flux-lab" { // render refuses --flux-path for a policy that is not gitops: flux
			args = append(args, "--flux-path", "examples/fleet/trees/"+c)
		}
		runFn(t, repo, args...)
		want := readTree(t, alone)
		for name, b := range want {
			if g, ok := got[c+"/"+name]; !ok || !bytes.Equal(g, b) {
				t.Errorf("%s/%s: fleet render differs from render alone (present: %v)", c, name, ok)
			}
		}
		for name := range got {
			if rest, ok := strings.CutPrefix(name, c+"/"); ok && want[rest] == nil {
				t.Errorf("%s: fleet render wrote %s, which render alone does not", c, rest)
			}
		}
	}
	if k := got["flux-lab/flux/kustomization.yaml"]; k == nil {
		t.Fatalf("flux-lab has no flux/ Kustomizations; files: %v", slices.Sorted(maps.Keys(got)))
	}
	if p := string(got["flux-lab/flux/fleet-prereqs.yaml"]); !strings.Contains(p, "path: ./examples/fleet/trees/flux-lab/00-prereqs") {
		t.Errorf("flux-lab's prereqs Kustomization does not read its own tree:\n%s", p)
	}

	// The same objects as kustomize's build of each cluster: fleet diff finds no change.
	os.RemoveAll(filepath.Join(fleet, "trees", "flux-lab"))
	if out := runFn(t, repo, "fleet", "diff", "examples/fleet/rendered", "examples/fleet/trees"); !strings.Contains(out, "No cluster changes: all 4 render the same objects.") {
		t.Errorf("fleet diff of kustomize's builds and fleet render's trees:\n%s", out)
	}

	// Deterministic: a second run over the first changes nothing.
	os.RemoveAll(filepath.Join(fleet, "trees"))
	runFn(t, repo, "fleet", "render", "examples/fleet/clusters", "-o", "examples/fleet/trees")
	out := runFn(t, repo, "fleet", "render", "examples/fleet/clusters", "-o", "examples/fleet/trees")
	if !strings.Contains(out, "unchanged: the tree already held exactly this render") {
		t.Errorf("a second fleet render over the first: %s", out)
	}
}
