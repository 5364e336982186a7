package realnode

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpupolicy/gpupolicy/e2e/internal/fakenode"
	"github.com/gpupolicy/gpupolicy/e2e/internal/realnode"
	"github.com/gpupolicy/gpupolicy/e2e/internal/stack"
	standin "github.com/gpupolicy/gpupolicy/e2e/internal/standin/layout"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// TestRealNodeDRA: on a real kubelet v1.37 with containerd 2.1, the DRA plugin (gpu-device-plugin
// dra against the dgxa100 mock, with its ServiceAccount's identity through the ResourceSlice
// guardrails) registers through plugins_registry and publishes the node's GPUs; the kube-scheduler
// allocates a claim of two requests; the kubelet calls NodePrepareResources, the plugin writes
// the claim's CDI spec, and containerd injects the devices of the one request the container
// references: it sees that GPU through the node's CDI spec (as the toolkit stage's nvidia-ctk
// writes it), NVIDIA_VISIBLE_DEVICES=void for the runtime, and nothing of the other request's
// GPU. When the pod goes, NodeUnprepareResources removes the spec. After a kubelet restart the
// plugin is found again and a second claim's pod runs.
func TestRealNodeDRA(t *testing.T) {
	ctx := context.Background()
	// The stand-in pause and workload images; no gpupolicy image is needed (the plugin runs as a
	// process here, as the rendered DaemonSet would run it).
	set := &imageSet{dir: filepath.Join(env.workDir, "images"), standins: map[string][]string{}}
	var tars []string
	for _, tar := range set.tars(t, "gpupolicy.dev/e2e/unused-toolkit:v1") {
		if tar != "" {
			tars = append(tars, tar)
		}
	}
	objs, err := stack.RenderPolicy(ctx, filepath.Join(env.repoRoot, "bin", "gpupolicy-fn"),
		filepath.Join(env.repoRoot, "e2e", "testdata", "dra", "policy.yaml"), filepath.Join(t.TempDir(), "rendered"))
	if err != nil {
		t.Fatal(err)
	}
	ns, dra := stack.DRAObjects(objs)
	a, err := stack.NewApplier(env.cfg, "e2e-dra")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Apply(ctx, "dra namespace", ns); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Apply(ctx, "dra", dra); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, o := range append(dra, ns...) {
			_ = a.Client().Delete(context.Background(), o)
		}
	})

	name := "gpu-dra"
	n, err := realnode.Start(ctx, realnode.Options{
		Name: name, Containerd: "2.1", Containerd21Dir: env.containerd21,
		Kubelet: env.bins.Kubelet, Kubeconfig: env.cluster.Kubeconfig, APIServer: env.cluster.Server,
		Dir: filepath.Join(env.workDir, name), Labels: map[string]string{"gpupolicy.dev/e2e": "dra"}, Images: tars,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("node %s failed; its logs are in %s\n%s", name, n.LogDir, n.Tail("kubelet", 30))
		}
		if err := n.Stop(); err != nil {
			t.Errorf("tear down node %s: %v", name, err)
		}
		_ = env.cs.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	diag := func() string { return n.Tail("kubelet", 15) }
	eventually(t, 90*time.Second, "node "+name+" Ready", diag, func() (bool, string) {
		node, err := getNode(name)
		if err != nil {
			return false, err.Error()
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
				return true, ""
			}
		}
		return false, fmt.Sprint(node.Status.Conditions)
	})

	plugin := startDRAPlugin(t, n, name)
	diag = func() string { return n.Tail("kubelet", 15) + "\n  plugin:\n  " + tail(plugin.String(), 10) }
	uuids := map[string]string{} // device name -> GPU UUID
	eventually(t, 60*time.Second, "the node's ResourceSlice with 8 GPUs", diag, func() (bool, string) {
		l, err := env.cs.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: resourcev1.ResourceSliceSelectorNodeName + "=" + name})
		if err != nil {
			return false, err.Error()
		}
		for _, s := range l.Items {
			for _, d := range s.Spec.Devices {
				uuids[d.Name] = *d.Attributes["uuid"].StringValue
			}
		}
		return len(uuids) == 8, fmt.Sprintf("%d devices", len(uuids))
	})
	writeNodeCDISpec(t, n, uuids)
	first := runClaimPod(t, n, set.workloadRef, "dra-first", uuids, diag)
	cdiSpecs := func() []string {
		m, _ := filepath.Glob(n.HostPath(filepath.Join("/run/cdi", config.DRAClaimCDIFilePrefix+"*.json")))
		return m
	}
	if got := cdiSpecs(); len(got) != 1 || !strings.Contains(got[0], string(first.claimUID)) {
		t.Errorf("CDI specs while the pod runs: %v, want the claim's (%s)", got, first.claimUID)
	}
	deleteClaimPod(t, "dra-first")
	eventually(t, 60*time.Second, "NodeUnprepareResources removed the claim's CDI spec", diag, func() (bool, string) {
		return len(cdiSpecs()) == 0, fmt.Sprint(cdiSpecs())
	})
	for _, want := range []string{"claim prepared", "claim unprepared"} {
		if !strings.Contains(plugin.String(), want) {
			t.Errorf("the plugin's log lacks %q: the kubelet did not call it\n%s", want, plugin.String())
		}
	}

	if _, err := n.RestartKubelet(ctx); err != nil {
		t.Fatal(err)
	}
	runClaimPod(t, n, set.workloadRef, "dra-after-restart", uuids, diag)
	deleteClaimPod(t, "dra-after-restart")
}

// startDRAPlugin runs `gpu-device-plugin dra` on the host against the node's kubelet
// directories (bound into the node's mount namespace, so the kubelet sees its sockets) and CDI
// directory (containerd reads it), as the plugin's ServiceAccount on that node.
func startDRAPlugin(t *testing.T, n *realnode.Node, node string) *bytes.Buffer {
	t.Helper()
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := fakenode.WriteKubeconfig(kubeconfig, fakenode.AgentConfig(env.cfg, "gpu-dra", "gpu-dra-plugin", node)); err != nil {
		t.Fatal(err)
	}
	log := &bytes.Buffer{}
	cmd := exec.Command(filepath.Join(env.repoRoot, "bin", "gpu-device-plugin"), "dra", "--nvml-mock", "dgxa100",
		"--node-name", node, "--kubeconfig", kubeconfig,
		"--plugins-dir", n.HostPath("/var/lib/kubelet/plugins"), "--registry-dir", n.HostPath("/var/lib/kubelet/plugins_registry"),
		"--cdi-dir", n.HostPath("/run/cdi"), "--host-root", n.HostPath("/"))
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("gpu-device-plugin dra:\n%s", log.String())
		}
	})
	return log
}

type claimPod struct {
	pod      *corev1.Pod
	claimUID string
}

// writeNodeCDISpec writes the node's CDI spec as the toolkit stage's (stand-in) nvidia-ctk does:
// kind nvidia.com/gpu, a device per GPU UUID whose edit sets standin.CDIDeviceEnv to it.
func writeNodeCDISpec(t *testing.T, n *realnode.Node, uuids map[string]string) {
	t.Helper()
	type device struct {
		Name           string              `json:"name"`
		ContainerEdits map[string][]string `json:"containerEdits"`
	}
	spec := struct {
		CDIVersion string   `json:"cdiVersion"`
		Kind       string   `json:"kind"`
		Devices    []device `json:"devices"`
	}{CDIVersion: "0.6.0", Kind: config.CDIKind}
	for _, uuid := range uuids {
		spec.Devices = append(spec.Devices, device{Name: uuid, ContainerEdits: map[string][]string{"env": {standin.CDIDeviceEnv + "=" + uuid}}})
	}
	slices.SortFunc(spec.Devices, func(a, b device) int { return strings.Compare(a.Name, b.Name) })
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	// The plugin's --cdi-dir is the node's /run/cdi (its /var/run/cdi: /var/run links to /run).
	if err := os.WriteFile(n.HostPath(filepath.Join("/run/cdi", filepath.Base(config.CDISpecFile))), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// runClaimPod creates ResourceClaim NAME of two requests (one whole GPU each: "gpu", which the
// pod's container references, and "spare", which no container does) and pod NAME, and waits
// until the container printed its environment: the "gpu" GPU through the node's CDI spec,
// NVIDIA_VISIBLE_DEVICES=void, and no trace of the "spare" GPU.
func runClaimPod(t *testing.T, n *realnode.Node, image, name string, uuids map[string]string, diag func() string) claimPod {
	t.Helper()
	ctx := context.Background()
	if _, err := env.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: workloadNS}}, metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	claim, err := env.cs.ResourceV1().ResourceClaims(workloadNS).Create(ctx, &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: workloadNS},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{
			{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "gpu.nvidia.com"}},
			{Name: "spare", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: "gpu.nvidia.com"}}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	grace := int64(1)
	pod, err := env.cs.CoreV1().Pods(workloadNS).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: workloadNS},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &grace,
			NodeSelector:                  map[string]string{"gpupolicy.dev/e2e": "dra"},
			Tolerations:                   []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			ResourceClaims:                []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &claim.Name}},
			Containers: []corev1.Container{{Name: "job", Image: image, ImagePullPolicy: corev1.PullNever,
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu", Request: "gpu"}}}}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteClaimPod(t, name) })
	var device, spare string
	eventually(t, 90*time.Second, "claim "+name+" allocated", diag, func() (bool, string) {
		c, err := env.cs.ResourceV1().ResourceClaims(workloadNS).Get(ctx, name, metav1.GetOptions{})
		if err != nil || c.Status.Allocation == nil || len(c.Status.Allocation.Devices.Results) != 2 {
			return false, fmt.Sprint(err, c.Status)
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.Request == "gpu" {
				device = r.Device
			} else {
				spare = r.Device
			}
		}
		return true, ""
	})
	uuid := uuids[device]
	start := time.Now()
	eventually(t, 90*time.Second, "pod "+name+" sees "+device+" ("+uuid+") through CDI", diag, func() (bool, string) {
		p, err := env.cs.CoreV1().Pods(workloadNS).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		pod = p
		l := podLog(n, p, "job")
		return strings.Contains(l, standin.WorkloadReady), podSummary([]corev1.Pod{*p}) + "\n    " + tail(l, 5)
	})
	l := podLog(n, pod, "job")
	for _, want := range []string{standin.CDIDeviceEnv + "=" + uuid, "NVIDIA_VISIBLE_DEVICES=void"} {
		if !strings.Contains(l, standin.EnvPrefix+want+"\n") {
			t.Errorf("%s: the container's environment lacks %s:\n%s", name, want, l)
		}
	}
	if strings.Contains(l, uuids[spare]) {
		t.Errorf("%s: the container, which references request gpu (%s), sees the GPU of request spare (%s %s):\n%s", name, device, spare, uuids[spare], l)
	}
	t.Logf("%s: claim allocated %s (%s); the container saw it through CDI %s later", name, device, uuid, time.Since(start).Round(time.Millisecond))
	return claimPod{pod: pod, claimUID: string(claim.UID)}
}

func deleteClaimPod(t *testing.T, name string) {
	ctx := context.Background()
	zero := int64(0)
	_ = env.cs.CoreV1().Pods(workloadNS).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	for i := 0; i < 150; i++ {
		if _, err := env.cs.CoreV1().Pods(workloadNS).Get(ctx, name, metav1.GetOptions{}); err != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	_ = env.cs.ResourceV1().ResourceClaims(workloadNS).Delete(ctx, name, metav1.DeleteOptions{})
}
