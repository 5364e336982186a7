package stages

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpupolicy/gpupolicy/plugin/agent/gate"
	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/nodefacts/hostfacts"
)

// The MPS check reads the daemon's record and pipe from the host (under --host-root): pending
// until the daemon has run, not ready with the daemon's reason, pending while it serves an
// older config, ready once it serves the pool's; a node outside the MPS pool passes.
func TestMPSCheck(t *testing.T) {
	cfg := agentConfig()
	cfg.Stages.MPS = true
	cfg.NodePools = []config.AgentPool{{Name: "inference", NodeSelector: map[string]string{"pool": "inference"},
		DevicePlugin: config.DevicePlugin{Pool: "inference", ResourceName: "nvidia.com/gpu", MIGStrategy: config.MIGNone,
			Sharing: config.Sharing{TimeSlicing: config.TimeSlicing{Replicas: 1}, MPS: &config.MPS{Replicas: 4}}}}}
	mpsNode := map[string]string{"pool": "inference"}
	for _, tc := range []struct {
		name    string
		labels  map[string]string
		status  *config.MPSStatus
		pipe    bool
		ready   bool
		pending bool
		reason  string
	}{
		{"outside the MPS pool", map[string]string{}, nil, false, true, false, "does not share GPUs with MPS"},
		{"no record yet", mpsNode, nil, false, false, true, "has not run on this node yet"},
		{"the daemon cannot serve", mpsNode, &config.MPSStatus{Pool: "inference", Resource: "nvidia.com/gpu", Replicas: 4, Reason: "GPU 3 (GPU-x) is in MIG mode"}, false, false, false, "cannot serve this node: GPU 3 (GPU-x) is in MIG mode"},
		{"an older config", mpsNode, &config.MPSStatus{Ready: true, Pool: "inference", Resource: "nvidia.com/gpu", Replicas: 2}, true, false, true, "has not applied this config yet"},
		{"no pipe", mpsNode, &config.MPSStatus{Ready: true, Pool: "inference", Resource: "nvidia.com/gpu", Replicas: 4}, false, false, false, "/run/nvidia/mps/nvidia.com/gpu/pipe/control is not there"},
		{"serving", mpsNode, &config.MPSStatus{Ready: true, Pool: "inference", Resource: "nvidia.com/gpu", Replicas: 4, GPUs: []string{"a", "b"}, ActiveThreadPercentage: 25}, true, true, false, "serves nvidia.com/gpu with 4 replicas on 2 GPUs (active threads 25% per client)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			mps := filepath.Join(root, config.MPSHostRoot)
			if tc.status != nil {
				b, _ := json.Marshal(tc.status)
				if err := os.MkdirAll(mps, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(config.MPSStatusFile(mps), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if tc.pipe {
				pipe := config.MPSPipeDir(mps, "nvidia.com/gpu")
				if err := os.MkdirAll(pipe, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(pipe, "control"), nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			f := &gate.Facts{Node: &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1", Labels: tc.labels}}, Host: hostfacts.Read(root)}
			res := MPSCheck(cfg)(f)
			if res.Ready != tc.ready || res.Pending != tc.pending || !strings.Contains(res.Reason, tc.reason) {
				t.Errorf("ready %v pending %v reason %q; want %v %v %q", res.Ready, res.Pending, res.Reason, tc.ready, tc.pending, tc.reason)
			}
			if !res.Ready && res.ConditionReason == "" {
				t.Error("no GPUStackReady reason")
			}
		})
	}
}
