package diff

import (
	"flag"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpupolicy/gpupolicy/fn/internal/fntest"
	"github.com/gpupolicy/gpupolicy/fn/testing/goldentree"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// containsAll fails t for each of wants that out lacks.
func containsAll(t *testing.T, out string, wants ...string) {
	t.Helper()
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	goldentree.File(t, filepath.Join("testdata", name), got, *update)
}

func TestGoldenUpgradeAll(t *testing.T) {
	for _, format := range []string{"md", "json"} {
		code, out, stderr := fntest.Call(Run, Options{Base: "testdata/base.yaml", Head: "testdata/head-upgrade-all.yaml", Format: format, FailOn: "none"})
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		golden(t, "upgrade-all."+format, []byte(out))
	}
}

func TestGoldenDriverContainer(t *testing.T) {
	code, out, stderr := fntest.Call(Run, Options{Base: "testdata/base.yaml", Head: "testdata/head-driver-container.yaml"})
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	golden(t, "driver-container.md", []byte(out))
	if !strings.Contains(out, "**warning**: privileges added to DaemonSet gpu-system/gpu-driver container") || !strings.Contains(out, "privileged") {
		t.Errorf("switching to the driver container must warn about the privileged container:\n%s", out)
	}
}

func TestGuardrailsOff(t *testing.T) {
	code, out, stderr := fntest.Call(Run, Options{Base: "testdata/base.yaml", Head: "testdata/head-no-guardrails.yaml", FailOn: "warning"})
	if code != 1 {
		t.Fatalf("exit %d, want 1 (%s)", code, stderr)
	}
	containsAll(t, out,
		"**warning**: guardrails loosened: ValidatingAdmissionPolicy gpupolicy-node-guardrails no longer enforces:",
		"**warning**: head policy spec.guardrails.enabled:",
		"Removed: ValidatingAdmissionPolicy gpupolicy-node-guardrails",
	)
}

func TestUpgradeWindowAndFailOn(t *testing.T) {
	for _, tc := range []struct {
		head, failOn string
		window       bool
		code         int
	}{
		{"head-driver-only.yaml", "warning", false, 0},
		{"head-upgrade-all.yaml", "error", true, 0},
		{"head-upgrade-all.yaml", "warning", true, 1},
		{"head-upgrade-all.yaml", "none", true, 0},
	} {
		code, out, stderr := fntest.Call(Run, Options{Base: "testdata/base.yaml", Head: "testdata/" + tc.head, FailOn: tc.failOn})
		if code != tc.code {
			t.Errorf("%s --fail-on %s: exit %d, want %d (%s)", tc.head, tc.failOn, code, tc.code, stderr)
		}
		if got := strings.Contains(out, "upgrade window"); got != tc.window {
			t.Errorf("%s: upgrade window warning = %v, want %v:\n%s", tc.head, got, tc.window, out)
		}
	}
}

// TestPresetsUpgradeWindow diffs two of the shipped presets: going from containerd 1.7 with
// CUDA 12 on Kubernetes 1.32 to containerd 2.1 with CUDA 13 on 1.34 is several upgrades at once.
func TestPresetsUpgradeWindow(t *testing.T) {
	code, out, stderr := fntest.Call(Run, Options{Base: "../../policies/preinstalled-containerd-1.7.yaml", Head: "../../policies/containerd-2-cdi.yaml", FailOn: "warning"})
	if code != 1 || !strings.Contains(out, "upgrade window: this change moves") || !strings.Contains(out, "cuda 12.8 → 13.0") {
		t.Fatalf("exit %d, stderr %s, out:\n%s", code, stderr, out)
	}
	if !strings.Contains(out, "-version = 2") || !strings.Contains(out, "+version = 3") {
		t.Errorf("the containerd drop-in diff must show the config version change:\n%s", out)
	}
}

// TestRenderedTreesMatchPolicies diffs the trees `render -o` writes: the same findings, except
// the Kubernetes version, which a rendered tree does not record.
func TestRenderedTreesMatchPolicies(t *testing.T) {
	base, head := fntest.WriteTree(t, "testdata/base.yaml"), fntest.WriteTree(t, "testdata/head-upgrade-all.yaml")
	code, out, stderr := fntest.Call(Run, Options{Base: base, Head: head, Format: "json"})
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{`"name": "driver"`, `"name": "cuda"`, `"name": "toolkit"`, "upgrade window: this change moves 3"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}

// TestPolicyAgainstTree compares a policy with a rendered tree: versions come from the rendered
// objects on both sides, so the same policy against its own tree moves nothing.
func TestPolicyAgainstTree(t *testing.T) {
	code, out, stderr := fntest.Call(Run, Options{Base: "testdata/base.yaml", Head: fntest.WriteTree(t, "testdata/base.yaml"), FailOn: "warning"})
	if code != 0 || !strings.Contains(out, "No findings.") || strings.Contains(out, "**changed**") || !strings.Contains(out, "| kubernetesVersion | — | — |  |") || !strings.Contains(out, "## Objects\n\nUnchanged.") {
		t.Fatalf("exit %d (%s):\n%s", code, stderr, out)
	}
}

// TestInvalidInput: the usage errors are fn/cli's (TestDiffUsage).
func TestInvalidInput(t *testing.T) {
	if code, _, stderr := fntest.Call(Run, Options{Base: "testdata/base.yaml", Head: "../testdata/invalid/cuda13-driver-too-old/policy.yaml"}); code != 1 || !strings.Contains(stderr, "spec.cuda.version") {
		t.Errorf("invalid head: exit %d, stderr %s", code, stderr)
	}
	code, out, _ := fntest.Call(Run, Options{Base: "testdata/base.yaml", Head: "testdata/base.yaml"})
	if code != 0 || !strings.Contains(out, "No findings.") {
		t.Errorf("identical inputs: exit %d:\n%s", code, out)
	}
}

// A changed MIG layout shows as a diff of the mig-parted file the MIG step applies.
func TestMIGLayoutChange(t *testing.T) {
	code, out, stderr := fntest.Call(Run, Options{Base: "testdata/base-mig.yaml", Head: "testdata/head-mig-layout.yaml", FailOn: "none"})
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(out, "## MIG layouts") || !strings.Contains(out, "-      1g.10gb: 7\n+      1g.10gb: 6\n") {
		t.Errorf("the MIG layout change is missing from the report:\n%s", out)
	}
	code, out, _ = fntest.Call(Run, Options{Base: "testdata/base-mig.yaml", Head: "testdata/base-mig.yaml", FailOn: "none"})
	if code != 0 || strings.Contains(out, "## MIG layouts") {
		t.Errorf("an unchanged layout must not show (exit %d):\n%s", code, out)
	}
}

// TestAllocationSwitch: moving a pool to DRA by one field shows the DaemonSet swap, the new
// DeviceClasses, the DRA plugin's RBAC, and warns that pods asking for the extended resource
// must move to ResourceClaims first.
func TestAllocationSwitch(t *testing.T) {
	code, out, stderr := fntest.Call(Run, Options{Base: "testdata/base-mig.yaml", Head: "testdata/head-training-dra.yaml", FailOn: "none"})
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	containsAll(t, out,
		"allocation of node pool training changes from the device plugin to DRA",
		"DeviceClass gpu.nvidia.com",
		"device.attributes['gpu.nvidia.com'].type == 'mig'",
		"DaemonSet gpu-system/gpu-dra-plugin-training",
		"get,list,watch,create,update,patch,delete resourceslices (resource.k8s.io)",
	)
	if strings.Contains(out, "node pool inference changes") {
		t.Errorf("the inference pool did not move:\n%s", out)
	}
}

// A node pool's own driver is a version of its own in the report: the bump shows in the
// summary and the Versions table, moves only gpu-driver-training, and counts as the one
// driver move of the upgrade window (with CUDA on top it warns).
func TestPoolDriverMove(t *testing.T) {
	code, out, stderr := fntest.Call(Run, Options{Base: "testdata/base-pool-driver.yaml", Head: "testdata/head-pool-driver.yaml", FailOn: "warning"})
	if code != 0 {
		t.Fatalf("exit %d: %s\n%s", code, stderr, out)
	}
	golden(t, "pool-driver.md", []byte(out))
	containsAll(t, out,
		"**Moves driver (pool training) 580.82.07 → 580.105.08;",
		"| driver (pool training) | `580.82.07` | `580.105.08` | **changed** |",
		"new pod template for 1 OnDelete DaemonSet (gpu-driver-training)",
	)
	if strings.Contains(out, "upgrade window") || strings.Contains(out, "Changed: DaemonSet gpu-system/gpu-driver —") {
		t.Errorf("one pool's driver is one move, of its own DaemonSet only:\n%s", out)
	}
	_, out, _ = fntest.Call(Run, Options{Base: "testdata/base-pool-driver.yaml", Head: "testdata/head-pool-driver-cuda.yaml", FailOn: "none"})
	if !strings.Contains(out, "upgrade window: this change moves 2 of driver") || !strings.Contains(out, "driver (pool training) 580.82.07 → 580.105.08") {
		t.Errorf("drivers and CUDA at once must warn, naming both drivers as one move:\n%s", out)
	}
}
