package render_test

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/gpupolicy/gpupolicy/fn/pipeline"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// TestRenderedDefaultsAreTheNodeDefaults ties the two sides of the node contract: a policy
// that sets nothing optional renders the device-plugin and agent ConfigMaps, the node
// programs' strict loaders read them, and what they read is plugin/config's defaults, which
// the device plugin also runs with when it has no --config. A default changed on one side
// only, or a field the renderer stops writing, fails here.
func TestRenderedDefaultsAreTheNodeDefaults(t *testing.T) {
	_, objs, res := pipeline.Load([]byte(cdiPolicyHead+"  driver: {version: \"580.95.05\"}\n"), today)
	if res.HasErrors() {
		t.Fatalf("%s", res.Text("policy.yaml"))
	}
	data := map[string]string{}
	for _, o := range objs {
		if cm, ok := o.Obj.(*corev1.ConfigMap); ok {
			data[cm.Name] = cm.Data[config.DevicePluginFile] // the same key as AgentConfigFile
		}
	}
	want := config.DefaultDevicePlugin()

	dpFile := writeNodeFile(t, data[config.DevicePluginConfigMap])
	dp, err := config.LoadDevicePlugin(dpFile)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(dp, want) {
		t.Errorf("rendered device plugin config, as the plugin loads it:\n%+v\nthe plugin's defaults:\n%+v", dp, want)
	}
	// Decoded over nothing, so a default the renderer leaves out (and the plugin fills in)
	// still differs from what the policy's defaulting chose.
	var bare config.DevicePlugin
	if err := yaml.UnmarshalStrict([]byte(data[config.DevicePluginConfigMap]), &bare); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(bare, want) {
		t.Errorf("rendered device plugin config states:\n%+v\nthe plugin's defaults:\n%+v", bare, want)
	}

	agent, err := config.LoadAgent(writeNodeFile(t, data[config.AgentConfigMap]))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(agent.DevicePlugin, want) || !reflect.DeepEqual(agent.PoolFor(nil), want) {
		t.Errorf("rendered agent config's device plugin settings:\n%+v\nthe plugin's defaults:\n%+v", agent.DevicePlugin, want)
	}
	if d, _ := config.AgentInterval(agent); d != config.DefaultAgentInterval {
		t.Errorf("rendered agent interval %s, the agent's default %s", d, config.DefaultAgentInterval)
	}
	// Only the MIG step and the MPS control daemon are off: they run where a pool declares MIG
	// layouts or MPS sharing.
	if !agent.Stages.FeatureDiscovery || !agent.Stages.Exporter || !slices.Equal(config.DisabledGateLabels(agent.Stages), []string{config.LabelDeployMIGManager, config.LabelDeployMPSControlDaemon}) {
		t.Errorf("a policy that disables nothing renders stages %+v", agent.Stages)
	}
}

func writeNodeFile(t *testing.T, body string) string {
	t.Helper()
	if body == "" {
		t.Fatal("ConfigMap not rendered")
	}
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
