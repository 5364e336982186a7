package stages

import (
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpupolicy/gpupolicy/plugin/agent/gate"
	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/nodefacts/hostfacts"
)

// A node of a pool with its own driver is held to that driver, read from its labels on every
// check; a node outside the pool to the policy's.
func TestDriverCheckFollowsThePoolDriver(t *testing.T) {
	cfg := agentConfig()
	cfg.NodePools = []config.AgentPool{{Name: "training", NodeSelector: map[string]string{"pool": "training"},
		Driver: &config.AgentDriver{Source: "container", Version: "570.195.03", Enforce: "exact"}}}
	root := t.TempDir()
	labels := map[string]string{}
	check := func() bool {
		f := &gate.Facts{Node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1", Labels: labels}}, Host: hostfacts.Read(root)}
		for _, c := range Checks(cfg) {
			if c.Stage == config.StageDriver {
				return c.Check(f).Ready
			}
		}
		t.Fatal("no driver check")
		return false
	}
	writeDriver(t, root, "570.195.03")
	if check() {
		t.Fatal("outside the pool, R570 must fail the policy's R580")
	}
	labels["pool"] = "training"
	if !check() {
		t.Fatal("in the pool, its own 570.195.03 must pass")
	}
	writeDriver(t, root, "580.95.05")
	if check() {
		t.Fatal("in the pool (enforce exact), the policy's driver is not the pool's")
	}
	// Without pool drivers the driver check reads no Node (nil here).
	for _, c := range Checks(agentConfig()) {
		if c.Stage == config.StageDriver {
			_ = c.Check(&gate.Facts{Host: hostfacts.Read(root)})
		}
	}
}

// A pool that asks for the open kernel modules holds a node running the proprietary ones as
// drift, labels the flavour loaded, and opens once the open module is loaded.
func TestDriverCheckKernelModules(t *testing.T) {
	cfg := agentConfig()
	cfg.NodePools = []config.AgentPool{{Name: "b200", NodeSelector: map[string]string{"pool": "b200"},
		Driver: &config.AgentDriver{Source: "container", Version: "580.95.05", Enforce: "branch", KernelModules: config.KernelModulesOpen}}}
	root := t.TempDir()
	check := func() gate.Result {
		f := &gate.Facts{Node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1", Labels: map[string]string{"pool": "b200"}}}, Host: hostfacts.Read(root)}
		for _, c := range Checks(cfg) {
			if c.Stage == config.StageDriver {
				return c.Check(f)
			}
		}
		t.Fatal("no driver check")
		return gate.Result{}
	}
	writeDriver(t, root, "580.95.05")
	if r := check(); r.Ready || r.ConditionReason != config.ReasonDriverDrift || r.Labels[config.LabelDriverKernelModules] != "proprietary" || r.Labels[config.LabelDriverDrift] != "true" {
		t.Fatalf("the proprietary module in an open pool: %+v", r)
	}
	p := filepath.Join(root, hostfacts.KernelDriverFile)
	if err := os.WriteFile(p, []byte("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  (dvs-builder@U22)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := check(); !r.Ready || r.Labels[config.LabelDriverKernelModules] != "open" || r.Labels[config.LabelDriverDrift] != "" {
		t.Fatalf("the open module in an open pool: %+v", r)
	}
}
