package examples

import (
	"bytes"
	"encoding/json"
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
		has           []string
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

// TestFleetDiff commits examples/fleet with every cluster built by real kustomize into a git
// repository, makes four kinds of change, each its own commit, and runs `gpupolicy-fn fleet
// diff PREV:examples/fleet/rendered REV:examples/fleet/rendered` over each pair of real
// revisions: the Markdown is golden (fleet/fleet-diff/<change>.md, -update rewrites it) and
// the JSON says which clusters move and how.
func TestFleetDiff(t *testing.T) {
	fleet := stageFleet(t)
	repo := filepath.Dir(filepath.Dir(fleet))
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=e2e", "-c", "user.email=e2e@example.com", "-c", "commit.gpgsign=false"}, args...)...)
		cmd.Dir = repo
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	commit := func(msg string) string {
		for _, c := range fleetClusters {
			if err := os.WriteFile(filepath.Join(fleet, "rendered", c+".yaml"), fleetBuild(t, fleet, c), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		git("add", "-A")
		git("commit", "-q", "--allow-empty", "-m", msg)
		return git("rev-parse", "HEAD")
	}
	edit := func(file, old, new string) {
		t.Helper()
		p := filepath.Join(fleet, file)
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(b, []byte(old)) {
			t.Fatalf("%s: %q not found (%v)", file, old, err)
		}
		if err := os.WriteFile(p, bytes.Replace(b, []byte(old), []byte(new), 1), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git("init", "-q", "-b", "main")
	base := commit("the fleet")

	type want struct {
		moving       []string // clusters that change
		pools        map[string][]string
		driverReload map[string][]string
		mig          map[string][]string
		containerd   []string
	}
	for _, step := range []struct {
		name   string
		change func()
		want   want
	}{
		{"driver-bump", func() { edit("base/gpupolicy.yaml", `version: "580.95.05"`, `version: "580.105.08"`) },
			// prod-us runs its own driver container version, so the base's bump does not reach it.
			want{moving: []string{"airgap", "dev", "prod-eu"}, pools: map[string][]string{"airgap": {"(default)"}, "dev": {"(default)"}, "prod-eu": {"(default)"}}}},
		{"pool-added", func() {
			edit("clusters/dev/policy/kustomization.yaml", "            replicas: 4\n", "            replicas: 4\n      nodePools:\n      - name: notebooks\n        nodeSelector:\n          gpupolicy.dev/pool: notebooks\n        devicePlugin:\n          sharing:\n            timeSlicing:\n              replicas: 8\n")
		}, want{moving: []string{"dev"}, pools: map[string][]string{"dev": {"(default)", "notebooks"}}}},
		{"mig-layout", func() {
			edit("clusters/prod-us/policy/kustomization.yaml", `profiles: {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}`, `profiles: {"4g.40gb": 1, "1g.10gb": 3}`)
		}, want{moving: []string{"prod-us"}, pools: map[string][]string{"prod-us": {"h100"}}, mig: map[string][]string{"prod-us": {"h100"}}}},
		{"driver-container-bump", func() {
			edit("clusters/prod-us/policy/kustomization.yaml", `version: "580.105.08"`, `version: "580.95.05"`)
		},
			want{moving: []string{"prod-us"}, pools: map[string][]string{"prod-us": {"(default)"}}, driverReload: map[string][]string{"prod-us": {"(default)"}}}},
		{"runtime-handler", func() {
			edit("clusters/dev/policy/kustomization.yaml", "      devicePlugin:\n", "      toolkit:\n        runtimeClassName: nvidia-gpu\n      devicePlugin:\n")
		}, want{moving: []string{"dev"}, pools: map[string][]string{"dev": {"(default)", "notebooks"}}, containerd: []string{"dev"}}},
		{"reformat", func() {
			edit("base/gpupolicy.yaml", "  cuda:\n    version: \"12.8\"\n", "  cuda: {version: \"12.8\"}   # the workloads' CUDA\n")
		}, want{}},
	} {
		prev := git("rev-parse", "HEAD")
		step.change()
		rev := commit(step.name)
		t.Run(step.name, func(t *testing.T) {
			run := func(format string) []byte {
				cmd := exec.Command(gpupolicyFn(t), "fleet", "diff", "-o", format, "--fail-on", "none",
					prev+":examples/fleet/rendered", rev+":examples/fleet/rendered")
				cmd.Dir = repo
				var stdout, stderr bytes.Buffer
				cmd.Stdout, cmd.Stderr = &stdout, &stderr
				if err := cmd.Run(); err != nil {
					t.Fatalf("fleet diff: %v\n%s", err, stderr.String())
				}
				return bytes.ReplaceAll(bytes.ReplaceAll(stdout.Bytes(), []byte(prev), []byte("PREV")), []byte(rev), []byte("REV"))
			}
			goldentree.File(t, filepath.Join("fleet", "fleet-diff", step.name+".md"), run("md"), *update)
			var r fleetReport
			if err := json.Unmarshal(run("json"), &r); err != nil {
				t.Fatal(err)
			}
			var moving []string
			for _, c := range r.Clusters {
				if c.Status != "unchanged" {
					moving = append(moving, c.Name)
				}
				if !slices.Equal(c.Pools, step.want.pools[c.Name]) || !slices.Equal(c.DriverReload, step.want.driverReload[c.Name]) ||
					!slices.Equal(c.MIGRepartition, step.want.mig[c.Name]) || c.ContainerdRestart != slices.Contains(step.want.containerd, c.Name) {
					t.Errorf("%s: pools %v, driver reload %v, MIG %v, containerd %v; want %v, %v, %v, %v", c.Name, c.Pools, c.DriverReload, c.MIGRepartition, c.ContainerdRestart,
						step.want.pools[c.Name], step.want.driverReload[c.Name], step.want.mig[c.Name], slices.Contains(step.want.containerd, c.Name))
				}
			}
			if !slices.Equal(moving, step.want.moving) {
				t.Errorf("clusters moving: %v, want %v", moving, step.want.moving)
			}
		})
	}
	// The whole history at once, and a revision against the working directory.
	cmd := exec.Command(gpupolicyFn(t), "fleet", "diff", "--fail-on", "none", base+":examples/fleet/rendered", "examples/fleet/rendered")
	cmd.Dir = repo
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "4 of 4 clusters move") {
		t.Errorf("fleet diff from the first revision to the working tree: %v\n%s", err, out)
	}
}

// fleetReport is the JSON of `fleet diff -o json`, read as a consumer (CI) would.
type fleetReport struct {
	Summary  string `json:"summary"`
	Clusters []struct {
		Name              string   `json:"name"`
		Status            string   `json:"status"`
		Pools             []string `json:"pools"`
		DaemonSets        []string `json:"daemonSets"`
		ContainerdRestart bool     `json:"containerdRestart"`
		DriverReload      []string `json:"driverReload"`
		MIGRepartition    []string `json:"migRepartition"`
	} `json:"clusters"`
}
