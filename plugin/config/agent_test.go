package config

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const validAgent = `driver: {source: preinstalled, version: "580.95.05", enforce: exact}
cudaVersion: "12.8"
containerRuntime: {version: "2.1"}
toolkit: {runtimeClassName: nvidia, dropInSHA256: 8d32d3c0925e245d5953ad43921355a74d29789c2359fc6a101fd0d723c186e1}
`

// The agent config loader refuses what the function refuses: a runtimeClassName of another
// runtime, replicas over MaxReplicas, a containerd minor that does not exist.
func TestLoadAgentRefusesWhatTheFunctionRefuses(t *testing.T) {
	for _, c := range []struct{ body, want string }{
		{strings.Replace(validAgent, "runtimeClassName: nvidia", "runtimeClassName: runc", 1),
			`toolkit.runtimeClassName "runc" is a runtime the nodes already have: the drop-in would point containerd's "runc" handler at nvidia-container-runtime, so every pod on the GPU nodes (runc is containerd's default runtime) would run through it; set spec.toolkit.runtimeClassName to a name of its own (the default is "nvidia") and re-render`},
		{strings.Replace(validAgent, "runtimeClassName: nvidia", "runtimeClassName: kata-qemu", 1), `toolkit.runtimeClassName "kata-qemu" is a runtime the nodes already have`},
		{validAgent + "devicePlugin: {sharing: {timeSlicing: {replicas: 100000}}}\n",
			`devicePlugin.sharing.timeSlicing.replicas 100000 is over the limit of 256 (spec.devicePlugin.sharing.timeSlicing.replicas of the policy): use at most 256 and re-render`},
		{validAgent + "nodePools: [{name: big, devicePlugin: {sharing: {timeSlicing: {replicas: 257}}}}]\n", `nodePools[0] (big).devicePlugin.sharing.timeSlicing.replicas 257 is over the limit of 256`},
		{strings.Replace(validAgent, `version: "2.1"`, `version: "1.8"`, 1),
			`containerRuntime.version "1.8": containerd 1.8 was never released (the minors are 1.6, 1.7, 2.0, 2.1, 2.2): use the node's minor from ` + "`containerd --version`" + ` (spec.containerRuntime.version of the policy)`},
		{strings.Replace(validAgent, `version: "2.1"`, `version: "1.5"`, 1), `containerRuntime.version "1.5": containerd 1.5 is older than the oldest supported minor 1.6`},
		{strings.Replace(validAgent, `version: "2.1"`, `version: "v1.7"`, 1), `containerRuntime.version "v1.7" is not a containerd minor X.Y`},
		{strings.Replace(validAgent, `version: "2.1"`, `version: "1.7.1"`, 1), `containerRuntime.version "1.7.1" is not a containerd minor X.Y`},
	} {
		if _, err := LoadAgent(write(t, c.body)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v\nwant %s", err, c.want)
		}
	}
	if _, err := LoadAgent(write(t, strings.Replace(validAgent, `version: "2.1"`, `version: "2.3"`, 1))); err != nil {
		t.Errorf("a minor newer than the newest known one is accepted, as the function accepts it: %v", err)
	}
}

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

// MPS needs at least 2 clients per GPU and excludes time-slicing; the error names the field.
func TestMPSSharingIsChecked(t *testing.T) {
	for _, c := range []struct {
		sharing Sharing
		want    string
	}{
		{Sharing{TimeSlicing: TimeSlicing{Replicas: 1}, MPS: &MPS{Replicas: 1}}, "devicePlugin.sharing.mps.replicas 1 is not between 2 and 48"},
		{Sharing{TimeSlicing: TimeSlicing{Replicas: 2}, MPS: &MPS{Replicas: 4}}, "devicePlugin.sharing: mps and timeSlicing replicas 2 are both set"},
		{Sharing{TimeSlicing: TimeSlicing{Replicas: 1}, MPS: &MPS{Replicas: 4}}, ""},
	} {
		err := checkReplicas("devicePlugin", DevicePlugin{Sharing: c.sharing})
		if (err == nil) != (c.want == "") || err != nil && !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.sharing, err, c.want)
		}
	}
	if s, r := (Sharing{TimeSlicing: TimeSlicing{Replicas: 1}, MPS: &MPS{Replicas: 4}}).Strategy(); s != SharingMPS || r != 4 {
		t.Errorf("Strategy() = %s %d", s, r)
	}
	// The device plugin refuses what k8s-device-plugin v0.17.4 refuses with MPS, and more
	// clients than the MPS server takes.
	for _, c := range []struct {
		edit func(*DevicePlugin)
		want string
	}{
		{func(*DevicePlugin) {}, ""},
		{func(d *DevicePlugin) { d.Sharing.MPS.Replicas = 1 }, "field sharing.mps.replicas: 1: MPS shares a GPU between 2 or more clients"},
		{func(d *DevicePlugin) { d.Sharing.MPS.Replicas = 49 }, "field sharing.mps.replicas: 49 is over 48"},
		{func(d *DevicePlugin) { d.Sharing.TimeSlicing.Replicas = 2 }, "field sharing: mps and timeSlicing replicas 2 are both set"},
		{func(d *DevicePlugin) { d.MIGStrategy = MIGMixed }, "field migStrategy: mixed with sharing.mps"},
		{func(d *DevicePlugin) { d.MIGStrategy = MIGSingle }, ""}, // whole GPUs where none is in MIG mode, as NVIDIA's
		{func(d *DevicePlugin) { d.Allocation = AllocationDRA }, "field sharing.mps with allocation dra"},
	} {
		cfg := DefaultDevicePlugin()
		cfg.Sharing.MPS = &MPS{Replicas: 4}
		c.edit(&cfg)
		err := ValidateDevicePlugin(cfg)
		if (err == nil) != (c.want == "") || err != nil && !strings.Contains(err.Error(), c.want) {
			t.Errorf("device plugin with MPS: %v, want %q", err, c.want)
		}
	}
}
