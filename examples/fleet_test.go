package examples

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpupolicy/gpupolicy/fn/testing/goldentree"
	"github.com/gpupolicy/gpupolicy/fn/testing/manifestcheck"
)

// fleetClusters are examples/fleet's cluster overlays.
var fleetClusters = []string{"airgap", "dev", "prod-eu", "prod-us"}

// stageFleet copies examples/fleet next to bin/gpupolicy-fn built from this checkout, as the
// committed relative exec path expects, and returns the copy's path.
func stageFleet(tb testing.TB) string {
	tb.Helper()
	fn := gpupolicyFn(tb)
	tmp := tb.TempDir()
	dst := filepath.Join(tmp, "examples", "fleet")
	if err := os.CopyFS(dst, os.DirFS("fleet")); err != nil {
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

// fleetBuild runs real kustomize in exec mode on one cluster overlay of the staged fleet; the
// function's warnings (stderr) fail the test: the example must be clean.
func fleetBuild(t *testing.T, fleet, cluster string) []byte {
	t.Helper()
	cmd := exec.Command(kustomize(t), "build", "--enable-alpha-plugins", "--enable-exec", filepath.Join(fleet, "clusters", cluster))
	cmd.Dir = t.TempDir()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil || stderr.Len() > 0 {
		t.Fatalf("kustomize build examples/fleet/clusters/%s: %v\n%s", cluster, err, stderr.String())
	}
	return stdout.Bytes()
}

// TestFleetExample builds every cluster overlay of examples/fleet with real kustomize: the
// output must equal the committed examples/fleet/rendered/<cluster>.yaml (-update rewrites
// them), decode strictly, and show what the overlay says about the cluster, while everything
// the base says stays the same in all four.
func TestFleetExample(t *testing.T) {
	entries, err := os.ReadDir("fleet/clusters")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, e := range entries {
		found = append(found, e.Name())
	}
	if !slices.Equal(found, fleetClusters) {
		t.Fatalf("examples/fleet/clusters holds %v; this test knows %v", found, fleetClusters)
	}
	fleet := stageFleet(t)
	built := map[string]string{}
	for _, c := range fleetClusters {
		out := fleetBuild(t, fleet, c)
		goldentree.File(t, filepath.Join("fleet", "rendered", c+".yaml"), out, *update)
		if _, errs := manifestcheck.DecodeAll(out); len(errs) > 0 {
			t.Errorf("%s: %v", c, errs)
		}
		built[c] = string(out)
	}
	for _, w := range []struct {
		cluster, what string
		has       []string
	}{
		{"dev", "time-slicing under its own resource name", []string{"resourceName: nvidia.com/gpu.shared", "replicas: 4"}},
		{"prod-eu", "the A100 MIG pool and the inference pool", []string{"name: gpu-device-plugin-training", "name: gpu-device-plugin-inference", "training.yaml: |", "1g.10gb: 7"}},
		{"prod-us", "the driver container and the H100 MIG layouts", []string{"nvcr.io/nvidia/driver:580.105.08-ubuntu22.04", "name: gpu-device-plugin-h100", "all-3g.40gb:"}},
		{"airgap", "the mirror and its pull secret", []string{"image: registry.airgap.internal:5000/mirror/", "- name: mirror-pull"}},
	} {
		for _, s := range w.has {
			if !strings.Contains(built[w.cluster], s) {
				t.Errorf("%s: %s: no %q in its build", w.cluster, w.what, s)
			}
		}
		for _, other := range fleetClusters {
			if other == w.cluster {
				continue
			}
			if s := w.has[0]; strings.Contains(built[other], s) {
				t.Errorf("%s's overlay leaked into %s: %q", w.cluster, other, s)
			}
		}
	}
	for _, c := range fleetClusters {
		if !strings.Contains(built[c], "name: gpu-node-agent") || !strings.Contains(built[c], "argocd.argoproj.io/sync-wave") {
			t.Errorf("%s lost what the base says (the agent, Argo CD's waves)", c)
		}
		if c != "airgap" && strings.Contains(built[c], "registry.airgap.internal") {
			t.Errorf("%s pulls from the air-gapped mirror", c)
		}
	}
}
