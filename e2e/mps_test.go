package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/deviceplugin/mps/mpstest"
)

// mpsPolicy shares the pool's GPUs between 4 MPS clients under a resource name of its own.
const mpsPolicy = `apiVersion: gpupolicy.dev/v1alpha1
kind: GPUPolicy
metadata:
  name: mps-e2e
spec:
  kubernetesVersion: "1.34"
  driver: {version: "580.95.05"}
  cuda: {version: "12.8"}
  devicePlugin: {deviceListStrategy: envvar}
  nodePools:
  - name: inference
    nodeSelector: {gpupolicy.dev/pool: mps-e2e}
    devicePlugin: {resourceName: nvidia.com/gpu.shared, sharing: {mps: {replicas: 4}}}
`

// TestMPSStageOpensTheDevicePlugin: on a node of an MPS pool the gate opens the MPS control
// daemon's gate after the toolkit stage, but not the device plugin's (GPUStackReady False
// MPSPending); the MPS control daemon (gpu-device-plugin mps-control-daemon, the rendered
// DaemonSet's command, over the dgxa100 mock with NVIDIA's control program stood in by this
// binary) records that it serves the pool; the gate then opens the device plugin and the
// feature labels say mps as gpu-feature-discovery does. When the daemon stops, the gate closes
// the device plugin's gate again (MPSNotReady). Every write goes through the guardrails with
// the node agent's identity.
func TestMPSStageOpensTheDevicePlugin(t *testing.T) {
	d := deployed(t)
	n := newProgramNode(t, d, "mps-a", mpsPolicy, "mps-e2e", "")

	n.step(t, "gate", false)
	l := n.labels(t)
	if l[config.LabelDeployMPSControlDaemon] != "true" || l[config.LabelDeployDevicePlugin] != "" {
		t.Fatalf("after the toolkit stage: %s", nvidiaLabels(t, n.name))
	}
	waitStackCondition(t, n.name, corev1.ConditionFalse, config.ReasonMPSPending)

	// The daemon, as the rendered DaemonSet of the pool runs it.
	var ds struct {
		Spec struct {
			Template struct {
				Spec corev1.PodSpec `json:"spec"`
			} `json:"template"`
		} `json:"spec"`
	}
	readObject(t, filepath.Join(n.rendered, "03-device-plugin", "daemonset-"+config.DaemonSetMPSControlDaemon+"-inference.yaml"), &ds)
	cmd := ds.Spec.Template.Spec.Containers[0].Command
	if len(cmd) < 2 || cmd[1] != "mps-control-daemon" {
		t.Fatalf("rendered command %v", cmd)
	}
	var dpCM corev1.ConfigMap
	readObject(t, filepath.Join(n.rendered, "00-prereqs", "configmap-"+config.DevicePluginConfigMap+"-inference.yaml"), &dpCM)
	dpConfig := filepath.Join(t.TempDir(), config.DevicePluginFile)
	writeFile(t, dpConfig, dpCM.Data[config.DevicePluginFile])
	bin := t.TempDir()
	if _, err := mpstest.Link(bin); err != nil {
		t.Fatal(err)
	}
	mpsDir := filepath.Join(n.root, config.MPSHostRoot)
	var log bytes.Buffer
	daemon := exec.Command(filepath.Join(env.repoRoot, "bin", "gpu-device-plugin"), "mps-control-daemon",
		"--config", dpConfig, "--mps-dir", mpsDir, "--host-root", n.root, "--nvml-mock", "dgxa100",
		"--listen", "127.0.0.1:0", "--interval", "200ms", "--node-name", n.name)
	daemon.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
	daemon.Stdout, daemon.Stderr = &log, &log
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			_ = daemon.Process.Signal(os.Interrupt)
			_ = daemon.Wait()
		}
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("gpu-device-plugin mps-control-daemon:\n%s", log.String())
		}
	})
	var st config.MPSStatus
	eventually(t, stageTimeout, "the MPS control daemon's record", func() (bool, string) {
		b, err := os.ReadFile(config.MPSStatusFile(mpsDir))
		if err != nil {
			return false, err.Error()
		}
		if err := json.Unmarshal(b, &st); err != nil {
			return false, err.Error()
		}
		return st.Ready, st.Reason
	})
	if st.Pool != "inference" || st.Resource != "nvidia.com/gpu.shared" || st.Replicas != 4 || st.ActiveThreadPercentage != 25 || len(st.GPUs) != 8 {
		t.Errorf("record %+v", st)
	}

	n.step(t, "gate", true)
	if l := n.labels(t); l[config.LabelDeployDevicePlugin] != "true" || l[config.LabelDeployFeatureDiscovery] != "true" {
		t.Fatalf("after the daemon serves the pool: %s", nvidiaLabels(t, n.name))
	}
	waitStackCondition(t, n.name, corev1.ConditionTrue, config.ReasonStackReady)
	if out, err := n.run(t, "labels"); err != nil {
		t.Fatalf("labels: %v\n%s", err, out)
	}
	l = n.labels(t)
	for k, want := range map[string]string{config.LabelMPSCapable: "true", config.LabelGPUSharingStrategy: config.SharingMPS, config.LabelGPUReplicas: "4"} {
		if l[k] != want {
			t.Errorf("feature label %s=%q, want %q", k, l[k], want)
		}
	}
	if p := l[config.LabelGPUProduct]; strings.HasSuffix(p, "-SHARED") {
		t.Errorf("product %q: a renamed resource keeps the product as it is (gpu-feature-discovery)", p)
	}

	// The daemon's pod ends: its record says so, and the device plugin's gate closes.
	stop()
	n.step(t, "gate", false)
	if l := n.labels(t); l[config.LabelDeployDevicePlugin] == "true" {
		t.Fatalf("the device plugin's gate stayed open without the MPS control daemon: %s", nvidiaLabels(t, n.name))
	}
	waitStackCondition(t, n.name, corev1.ConditionFalse, config.ReasonMPSNotReady)
}
