package cli

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpupolicy/gpupolicy/fn/internal/fntest"
)

const policyFile = "../render/testdata/default/policy.yaml"

func TestRenderWritesTree(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "rendered")
	code, out, errs := fntest.Run(Render, "-f", policyFile, "-o", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if !strings.Contains(out, "30 objects, 32 files") {
		t.Fatalf("stdout: %s", out)
	}
	for _, f := range []string{"kustomization.yaml", AuditFile, "00-prereqs/namespace-gpu-system.yaml", "01-driver/daemonset-gpu-driver.yaml",
		"02-container-toolkit/daemonset-gpu-container-toolkit.yaml", "03-device-plugin/daemonset-gpu-device-plugin.yaml",
		"04-observability/daemonset-gpu-exporter.yaml"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	if !strings.Contains(out, "new tree: every file added") {
		t.Errorf("a new tree must say so: %s", out)
	}
	// The manifest is sha256sum's format, so the tree can be checked without gpupolicy-fn.
	if _, err := exec.LookPath("sha256sum"); err == nil {
		cmd := exec.Command("sha256sum", "--quiet", "-c", ManifestFile)
		cmd.Dir = dir
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("sha256sum -c %s: %v\n%s", ManifestFile, err, b)
		}
	}
	// A second render replaces the tree: a stale file an earlier render wrote (in its
	// manifest) disappears, nothing is left beside it, and the change says so.
	stale := filepath.Join(dir, "01-driver", "daemonset-old.yaml")
	if err := os.WriteFile(stale, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	asIfRendered(t, dir, "01-driver/daemonset-old.yaml")
	code, out, errs = fntest.Run(Render, "-f", policyFile, "-o", dir)
	if code != 0 {
		t.Fatalf("second render: exit %d: %s", code, errs)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatal("the stale file survived the second render")
	}
	if !strings.HasSuffix(out, "0 added, 0 changed, 1 removed:\n  removed 01-driver/daemonset-old.yaml\n") {
		t.Errorf("second render must list the removed file: %s", out)
	}
	if code, out, _ = fntest.Run(Render, "-f", policyFile, "-o", dir); code != 0 || !strings.Contains(out, "unchanged: the tree already held exactly this render") {
		t.Errorf("third render: exit %d: %s", code, out)
	}
	siblings, _ := os.ReadDir(filepath.Dir(dir))
	if len(siblings) != 1 {
		t.Fatalf("temporary directories left behind: %v", siblings)
	}
}

// TestRenderReportsChanges: a render into a tree an earlier render wrote names every file it
// adds, changes and removes (here the exporter is turned off and the driver version moves).
func TestRenderReportsChanges(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "gpu")
	if code, _, errs := fntest.Run(Render, "-f", policyFile, "-o", dir); code != 0 {
		t.Fatal(errs)
	}
	src, _ := os.ReadFile(policyFile)
	head := filepath.Join(t.TempDir(), "policy.yaml")
	changed := strings.Replace(string(src), "spec:\n", "spec:\n  exporter: {enabled: false}\n", 1)
	if err := os.WriteFile(head, []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errs := fntest.Run(Render, "-f", head, "-o", dir)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	for _, want := range []string{"  changed AUDIT.md\n", "  changed kustomization.yaml\n", "  removed 04-observability/daemonset-gpu-exporter.yaml\n", "  removed 04-observability/servicemonitor-gpu-exporter.yaml\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, ManifestFile) {
		t.Errorf("the manifest is bookkeeping, not a change:\n%s", out)
	}
}

// TestRenderKeepsUserFileInKustomization is the way a person loses a file with a tree whose
// kustomization.yaml alone says what render wrote: they add their own manifest and list it
// there. Render refuses, naming the file and the fix, and touches nothing; the same holds for
// a tree rendered before the manifest existed (render's label on each object tells its own).
func TestRenderKeepsUserFileInKustomization(t *testing.T) {
	for _, legacy := range []bool{false, true} {
		dir := filepath.Join(t.TempDir(), "gpu")
		if code, _, errs := fntest.Run(Render, "-f", policyFile, "-o", dir); code != 0 {
			t.Fatal(errs)
		}
		if legacy {
			if err := os.Remove(filepath.Join(dir, ManifestFile)); err != nil {
				t.Fatal(err)
			}
		}
		mine := filepath.Join(dir, "01-driver", "limits.yaml")
		body := "apiVersion: v1\nkind: LimitRange\nmetadata: {name: mine}\n"
		if err := os.WriteFile(mine, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		k := filepath.Join(dir, "kustomization.yaml")
		kb, _ := os.ReadFile(k)
		if err := os.WriteFile(k, append(kb, "- 01-driver/limits.yaml\n"...), 0o644); err != nil {
			t.Fatal(err)
		}
		code, _, errs := fntest.Run(Render, "-f", policyFile, "-o", dir)
		want := dir + " holds 01-driver/limits.yaml, which render did not write (not in its " + ManifestFile + "): render replaces the whole directory and would delete them; move them out of " + dir
		if code != 1 || !strings.Contains(errs, want) {
			t.Errorf("legacy=%v: exit %d: %s\nwant %s", legacy, code, errs, want)
		}
		if b, _ := os.ReadFile(mine); string(b) != body {
			t.Errorf("legacy=%v: the user's file was touched", legacy)
		}
		// Without the user's file, the legacy tree is render's own and is replaced.
		if legacy {
			os.Remove(mine)
			os.WriteFile(k, kb, 0o644)
			if code, _, errs := fntest.Run(Render, "-f", policyFile, "-o", dir); code != 0 {
				t.Errorf("legacy tree: exit %d: %s", code, errs)
			}
			if _, err := os.Stat(filepath.Join(dir, ManifestFile)); err != nil {
				t.Error("a re-rendered legacy tree must get its manifest")
			}
		}
	}
}

// TestRenderRefusesBadManifest: a manifest that is not render's format is named, with the fix.
func TestRenderRefusesBadManifest(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "gpu")
	if code, _, errs := fntest.Run(Render, "-f", policyFile, "-o", dir); code != 0 {
		t.Fatal(errs)
	}
	if err := os.WriteFile(filepath.Join(dir, ManifestFile), []byte("abc  ../../etc/passwd\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errs := fntest.Run(Render, "-f", policyFile, "-o", dir)
	if want := filepath.Join(dir, ManifestFile) + ` line 1 is not "<sha256>  <path inside the tree>": render writes this file; restore it from git`; code != 1 || !strings.Contains(errs, want) {
		t.Errorf("exit %d: %s\nwant %s", code, errs, want)
	}
}

func TestRenderRefusesForeignDir(t *testing.T) {
	dir := t.TempDir()
	keep := filepath.Join(dir, "README.md")
	if err := os.WriteFile(keep, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errs := fntest.Run(Render, "-f", policyFile, "-o", dir)
	if code != 1 || !strings.Contains(errs, "not written by gpupolicy-fn render") {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if b, _ := os.ReadFile(keep); string(b) != "mine" {
		t.Fatal("a foreign file was touched")
	}
}

// TestRenderKeepsForeignEntries: a tree render wrote before, which now also holds a .git and
// the user's policy, is refused with every foreign entry named, and nothing in it is lost.
func TestRenderKeepsForeignEntries(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "repo")
	if code, _, errs := fntest.Run(Render, "-f", policyFile, "-o", dir); code != 0 {
		t.Fatal(errs)
	}
	src, _ := os.ReadFile(policyFile)
	mine := map[string]string{".git/HEAD": "ref: refs/heads/main\n", "notes.md": "mine", "01-driver/extra.yaml": "x"}
	for name, body := range mine {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	code, _, errs := fntest.Run(Render, "-f", policyFile, "-o", dir)
	want := dir + " holds .git/, 01-driver/extra.yaml, notes.md, which render did not write (not in its " + ManifestFile + "): render replaces the whole directory and would delete them; move them out of " + dir
	if code != 1 || !strings.Contains(errs, want) {
		t.Fatalf("exit %d: %s\nwant %s", code, errs, want)
	}
	for name, body := range mine {
		if b, _ := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name))); string(b) != body {
			t.Errorf("%s was touched", name)
		}
	}

	// The policy itself inside the tree: always refused, before anything is read or written.
	inside := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(inside, src, 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errs = fntest.Run(Render, "-f", inside, "-o", dir)
	want = "render: -f " + inside + " lies inside -o " + dir + ", which render replaces as a whole (the policy would be deleted): render into a directory that does not hold it, e.g. -o " + filepath.Join(dir, "gpu")
	if code != 2 || !strings.Contains(errs, want) {
		t.Fatalf("exit %d: %s\nwant %s", code, errs, want)
	}
	if b, _ := os.ReadFile(inside); !bytes.Equal(b, src) {
		t.Fatal("the policy was touched")
	}
}

// TestRenderThroughLink: -o naming a symbolic link renders into the directory it points to and
// keeps the link; a dangling link is refused.
func TestRenderThroughLink(t *testing.T) {
	base := t.TempDir()
	target := filepath.Join(base, "fleet", "gpu")
	if code, _, errs := fntest.Run(Render, "-f", policyFile, "-o", target); code != 0 {
		t.Fatal(errs)
	}
	stale := filepath.Join(target, "01-driver", "daemonset-old.yaml")
	if err := os.WriteFile(stale, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	asIfRendered(t, target, "01-driver/daemonset-old.yaml")
	link := filepath.Join(base, "gpu")
	if err := os.Symlink(filepath.Join("fleet", "gpu"), link); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := fntest.Run(Render, "-f", policyFile, "-o", link); code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if st, err := os.Lstat(link); err != nil || st.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the link was replaced: %v %v", st, err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatal("the target kept the old tree")
	}
	if _, err := os.Stat(filepath.Join(target, "kustomization.yaml")); err != nil {
		t.Fatal(err)
	}

	dangling := filepath.Join(base, "dangling")
	if err := os.Symlink("nowhere", dangling); err != nil {
		t.Fatal(err)
	}
	code, _, errs := fntest.Run(Render, "-f", policyFile, "-o", dangling)
	want := dangling + " is a symbolic link to nowhere, which does not resolve (no such file or directory): create the directory it points to, or give -o a directory"
	if code != 1 || !strings.Contains(errs, want) {
		t.Fatalf("exit %d: %s\nwant %s", code, errs, want)
	}
	if dest, err := os.Readlink(dangling); err != nil || dest != "nowhere" {
		t.Fatal("the dangling link was touched")
	}
}

// TestRenderErrorWritesNothing: an invalid policy leaves an existing tree exactly as it was.
func TestRenderErrorWritesNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	if code, _, errs := fntest.Run(Render, "-f", policyFile, "-o", dir); code != 0 {
		t.Fatal(errs)
	}
	before, _ := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	src, _ := os.ReadFile(policyFile)
	if err := os.WriteFile(bad, bytes.Replace(src, []byte(`"12.8"`), []byte(`12.10`), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errs := fntest.Run(Render, "-f", bad, "-o", dir)
	if code != 1 || !strings.Contains(errs, "spec.cuda.version") || !strings.Contains(errs, "nothing was written") {
		t.Fatalf("exit %d: %s", code, errs)
	}
	after, _ := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if !bytes.Equal(before, after) {
		t.Fatal("the tree changed after a failed render")
	}
}

func TestRenderFluxLayout(t *testing.T) {
	src, _ := os.ReadFile(policyFile)
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, bytes.Replace(src, []byte("spec:\n"), []byte("spec:\n  gitops: flux\n"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "gpu")
	code, _, errs := fntest.Run(Render, "-f", policy, "-o", dir, "--flux-path", "clusters/prod/gpu")
	if code != 0 {
		t.Fatal(errs)
	}
	ks, err := os.ReadFile(filepath.Join(dir, "flux", "fleet-device-plugin.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"path: ./clusters/prod/gpu/03-device-plugin", "- name: fleet-container-toolkit", "wait: true", "kind: Kustomization"} {
		if !strings.Contains(string(ks), want) {
			t.Errorf("flux Kustomization lacks %q:\n%s", want, ks)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "02-container-toolkit", "kustomization.yaml")); err != nil {
		t.Error(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "kustomization.yaml")); !os.IsNotExist(err) {
		t.Error("the flux layout has no root kustomization (each stage is its own Flux Kustomization)")
	}
}

func TestRenderUsage(t *testing.T) {
	code, _, errs := fntest.Run(Render, "--help")
	if code != 0 || !strings.Contains(errs, "-flux-path") || !strings.Contains(errs, "04-observability") {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if code, _, _ := fntest.Run(Render, "-f", policyFile); code != 2 {
		t.Fatalf("missing -o: exit %d", code)
	}
}

// TestRenderFluxFlags: a --flux-* flag Flux could not read, or one the policy would ignore, is
// refused with exit 2 before anything is written.
func TestRenderFluxFlags(t *testing.T) {
	flux, err := filepath.Abs("../render/testdata/flux/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	argo, _ := filepath.Abs(policyFile)
	for _, c := range []struct {
		policy string
		args   []string
		want   string
	}{
		{flux, []string{"--flux-namespace", "BAD_NS"}, `render: --flux-namespace "BAD_NS" is not a namespace name (a lowercase RFC 1123 label`},
		{flux, []string{"--flux-namespace", "gpu-system"}, "render: --flux-namespace gpu-system is spec.namespace, which the prereqs stage owns and prunes with the GPU stack: keep the Kustomizations in Flux's own namespace, e.g. --flux-namespace flux-system; nothing was written"},
		{flux, []string{"--flux-source", "GitRepository/a/b"}, `render: --flux-source "GitRepository/a/b" must be KIND/NAME, e.g. GitRepository/flux-system`},
		{flux, []string{"--flux-source", "Git/fleet"}, `render: --flux-source "Git/fleet": Git is not a Flux source kind: use one of GitRepository, OCIRepository, Bucket, ExternalArtifact, e.g. GitRepository/fleet`},
		{flux, []string{"--flux-source", "GitRepository/Fleet_1"}, `render: --flux-source "GitRepository/Fleet_1": "Fleet_1" is not a Kubernetes object name`},
		{flux, []string{"--flux-path", "../../x"}, `render: --flux-path "../../x" leaves the Git repository Flux reads (spec.path is relative to its root): give the tree's path from the repository root with --flux-path, e.g. ./clusters/prod/gpu; nothing was written`},
		{flux, []string{"--flux-path", "/abs"}, `render: --flux-path "/abs" is absolute: Flux reads spec.path relative to the root of the Git repository; give the tree's path from there with --flux-path, e.g. ./abs; nothing was written`},
		{flux, []string{"-o", "../x"}, `render: -o "../x" leaves the Git repository Flux reads`},
		{argo, []string{"--flux-namespace", "flux"}, "render: --flux-namespace apply to gitops: flux only, and the policy has gitops: argocd: drop them, or set spec.gitops: flux; nothing was written"},
	} {
		base := t.TempDir()
		work := filepath.Join(base, "repo")
		if err := os.Mkdir(work, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Chdir(work)
		args := append([]string{"-f", c.policy}, c.args...)
		if !slices.Contains(c.args, "-o") {
			args = append(args, "-o", "out")
		}
		code, _, errs := fntest.Run(Render, args...)
		if code != 2 || !strings.Contains(errs, c.want) {
			t.Errorf("%v: exit %d: %s\nwant %s", c.args, code, errs, c.want)
		}
		for _, d := range []string{filepath.Join(work, "out"), filepath.Join(base, "x")} {
			if _, err := os.Stat(d); !os.IsNotExist(err) {
				t.Errorf("%v: %s was written", c.args, d)
			}
		}
	}
	// A path from the repository root, with ./ and a trailing slash, is the Kustomizations' path.
	out := filepath.Join(t.TempDir(), "gpu")
	if code, _, errs := fntest.Run(Render, "-f", flux, "-o", out, "--flux-path", "./clusters/prod/gpu/"); code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	b, _ := os.ReadFile(filepath.Join(out, "flux", "fleet-prereqs.yaml"))
	if !strings.Contains(string(b), "path: ./clusters/prod/gpu/00-prereqs\n") {
		t.Fatalf("flux/fleet-prereqs.yaml:\n%s", b)
	}
}

// asIfRendered adds name to the tree's manifest, as if an earlier render had written it.
func asIfRendered(t *testing.T, dir, name string) {
	t.Helper()
	m := filepath.Join(dir, ManifestFile)
	mb, err := os.ReadFile(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(m, append(mb, strings.Repeat("0", 64)+"  "+name+"\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
}
