package stages

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// A node of a pool with its own driver is held to that driver, read from its labels on every
// check; a node outside the pool to the policy's.
func TestDriverCheckFollowsThePoolDriver(t *testing.T) {
	cfg := agentConfig()
	cfg.NodePools = []config.AgentPool{{Name: "training", NodeSelector: map[string]string{"pool": "training"},
		Driver: &config.AgentDriver{Source: "container", Version: "570.195.03", Enforce: "exact"}}}
	root := t.TempDir()
	labels := map[string]string{}
	node := func(context.Context) (*corev1.Node, error) {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1", Labels: labels}}, nil
	}
	check := func() bool {
		for _, c := range Checks(cfg, root, node) {
			if c.Stage == config.StageDriver {
				return c.Check(context.Background()).Ready
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
	// Without pool drivers the driver check reads no Node (node is nil here).
	for _, c := range Checks(agentConfig(), root, nil) {
		if c.Stage == config.StageDriver {
			_ = c.Check(context.Background())
		}
	}
}
