package cli

import (
	"bytes"
	"os"
	"path/filepath"
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
	if !strings.Contains(out, "26 objects, 28 files") {
		t.Fatalf("stdout: %s", out)
	}
	for _, f := range []string{"kustomization.yaml", AuditFile, "00-prereqs/namespace-gpu-system.yaml", "01-driver/daemonset-gpu-driver.yaml",
		"02-container-toolkit/daemonset-gpu-container-toolkit.yaml", "03-device-plugin/daemonset-gpu-device-plugin.yaml",
		"04-observability/daemonset-gpu-exporter.yaml"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
	// A second render replaces the tree: a stale file disappears, nothing is left beside it.
	stale := filepath.Join(dir, "01-driver", "daemonset-old.yaml")
	if err := os.WriteFile(stale, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := fntest.Run(Render, "-f", policyFile, "-o", dir); code != 0 {
		t.Fatalf("second render: exit %d: %s", code, errs)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatal("the stale file survived the second render")
	}
	siblings, _ := os.ReadDir(filepath.Dir(dir))
	if len(siblings) != 1 {
		t.Fatalf("temporary directories left behind: %v", siblings)
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
