package config

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const validAgent = `driver: {source: preinstalled, version: "580.95.05", enforce: exact}
cudaVersion: "12.8"
toolkit: {runtimeClassName: nvidia, dropInSHA256: 8d32d3c0925e245d5953ad43921355a74d29789c2359fc6a101fd0d723c186e1}
`

func TestLoadAgent(t *testing.T) {
	cfg, err := LoadAgent(write(t, validAgent))
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := AgentInterval(cfg); d != DefaultAgentInterval {
		t.Fatalf("default interval %s", d)
	}
	cfg.Interval = "5s"
	if d, _ := AgentInterval(cfg); d != 5*time.Second {
		t.Fatalf("interval %s", d)
	}
	for field, body := range map[string]string{
		"interval":                 validAgent + "interval: soon\n",
		"driver.version":           strings.Replace(validAgent, `version: "580.95.05"`, `version: ""`, 1),
		"driver.enforce":           strings.Replace(validAgent, "enforce: exact", "enforce: strict", 1),
		"toolkit.dropInSHA256":     strings.Replace(validAgent, "8d32d3c0925e245d5953ad43921355a74d29789c2359fc6a101fd0d723c186e1", "abc", 1),
		"toolkit.runtimeClassName": strings.Replace(validAgent, "runtimeClassName: nvidia", "runtimeClassName: \"\"", 1),
		"unknown field":            validAgent + "extra: 1\n",
	} {
		if _, err := LoadAgent(write(t, body)); err == nil || !strings.Contains(err.Error(), strings.TrimSuffix(field, " field")) {
			t.Errorf("%s: %v", field, err)
		}
	}
	// The agent refuses what the function refuses (CheckDriverVersion), naming the spelling to write.
	if _, err := LoadAgent(write(t, strings.Replace(validAgent, `"580.95.05"`, `"580.95.5"`, 1))); err == nil ||
		!strings.Contains(err.Error(), `driver.version: "580.95.5" is not how NVIDIA writes this driver version: write "580.95.05"`) {
		t.Errorf("non-canonical driver.version: %v", err)
	}
	if _, err := LoadAgent(filepath.Join(t.TempDir(), "absent.yaml")); err == nil || !strings.Contains(err.Error(), "ConfigMap gpu-node-agent") {
		t.Errorf("absent: %v", err)
	}
}

func TestPoolFor(t *testing.T) {
	cfg := &Agent{
		DevicePlugin: DevicePlugin{Sharing: Sharing{TimeSlicing: TimeSlicing{Replicas: 1}}},
		NodePools: []AgentPool{{Name: "inference", NodeSelector: map[string]string{"pool": "inference"},
			DevicePlugin: DevicePlugin{Sharing: Sharing{TimeSlicing: TimeSlicing{Replicas: 4}}}}},
	}
	if dp := cfg.PoolFor(map[string]string{"pool": "inference"}); dp.Sharing.TimeSlicing.Replicas != 4 || dp.Pool != "inference" {
		t.Fatalf("pool node: %+v", dp)
	}
	if dp := cfg.PoolFor(map[string]string{"pool": "training"}); dp.Sharing.TimeSlicing.Replicas != 1 {
		t.Fatalf("other node: %+v", dp)
	}
	if dp := cfg.PoolFor(nil); dp.Sharing.TimeSlicing.Replicas != 1 || dp.Pool != "" {
		t.Fatalf("node without labels: %+v", dp)
	}
}

func TestMatchesNodeSelector(t *testing.T) {
	node := map[string]string{"pool": "inference", "zone": "a", "empty": ""}
	for _, tc := range []struct {
		sel  map[string]string
		want bool
	}{
		{map[string]string{"pool": "inference"}, true},
		{map[string]string{"pool": "inference", "zone": "a"}, true},
		{map[string]string{"pool": "inference", "zone": "b"}, false},
		{map[string]string{"empty": ""}, true},
		{map[string]string{"absent": ""}, false}, // as the scheduler: the key must be there
		{map[string]string{}, false},             // an empty selector takes no node
		{nil, false},
	} {
		if got := MatchesNodeSelector(node, tc.sel); got != tc.want {
			t.Errorf("%v: %v, want %v", tc.sel, got, tc.want)
		}
	}
}
