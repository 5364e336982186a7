package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"

	"github.com/gpupolicy/gpupolicy/e2e/internal/fakenode"
	"github.com/gpupolicy/gpupolicy/e2e/internal/stack"
	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/deviceplugin/mps/mpstest"
)

const (
	draNamespace = "gpu-dra"
	draPluginSA  = "gpu-dra-plugin"
)

// draStack renders testdata/dra/policy.yaml with the real function and returns every object.
func draStack(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	objs, err := stack.RenderPolicy(context.Background(), filepath.Join(env.repoRoot, "bin", "gpupolicy-fn"),
		filepath.Join(env.repoRoot, "e2e", "testdata", "dra", "policy.yaml"), filepath.Join(t.TempDir(), "rendered"))
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// draNode is one kwok node whose DRA plugin runs as the process the rendered DaemonSet
// starts (gpu-device-plugin dra against the dgxa100 mock), with the plugin's identity (its
// ServiceAccount and the node-name claim) through the ResourceSlice guardrails.
type draNode struct {
	name string
	root string
	cmd  *exec.Cmd
	log  *bytes.Buffer
	// mpsDir is the plugin's MPS root (on a tmpfs, as the host's /run is), smiLog what the
	// stand-in nvidia-smi was asked: NVIDIA's MPS control program (mpstest, this binary) and
	// nvidia-smi come with the driver, so the plugin runs stand-ins from its PATH.
	mpsDir, smiLog string
}

func startDRANode(t *testing.T, name, migState string) *draNode {
	t.Helper()
	joinNode(t, fakenode.Spec{Name: name, Labels: map[string]string{"gpupolicy.dev/e2e": "dra"}})
	n := &draNode{name: name, root: t.TempDir(), log: &bytes.Buffer{}}
	kubeconfig := filepath.Join(n.root, "kubeconfig")
	if err := fakenode.WriteKubeconfig(kubeconfig, fakenode.AgentConfig(env.cfg, draNamespace, draPluginSA, name)); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(n.root, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := mpstest.Link(bin); err != nil {
		t.Fatal(err)
	}
	n.smiLog = filepath.Join(n.root, "nvidia-smi.log")
	writeFile(t, filepath.Join(bin, "nvidia-smi"), "#!/bin/sh\necho \"$*\" >> "+n.smiLog+"\n")
	if err := os.Chmod(filepath.Join(bin, "nvidia-smi"), 0o755); err != nil {
		t.Fatal(err)
	}
	mpsDir, err := os.MkdirTemp("/dev/shm", "gpupolicy-e2e-mps-")
	if err != nil {
		t.Fatal(err)
	}
	n.mpsDir = mpsDir
	t.Cleanup(func() {
		// Claims a failed test left prepared keep their stand-in control daemons: quit them.
		pipes, _ := filepath.Glob(filepath.Join(mpsDir, "dra", "*", "pipe"))
		for _, p := range pipes {
			_, _ = mpsControl(p, "quit")
		}
		os.RemoveAll(mpsDir)
	})
	n.cmd = exec.Command(filepath.Join(env.repoRoot, "bin", "gpu-device-plugin"), "dra",
		"--nvml-mock", "dgxa100", "--node-name", name, "--kubeconfig", kubeconfig,
		"--plugins-dir", filepath.Join(n.root, "plugins"), "--registry-dir", filepath.Join(n.root, "plugins_registry"),
		"--cdi-dir", filepath.Join(n.root, "cdi"), "--host-root", n.root, "--mps-dir", n.mpsDir)
	n.cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
	if migState != "" {
		state := filepath.Join(n.root, "nvml-mock-mig.json")
		b, err := os.ReadFile(migState)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, state, string(b))
		n.cmd.Env = append(n.cmd.Env, mockMIGState+"="+state)
	}
	n.cmd.Stdout, n.cmd.Stderr = n.log, n.log
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = n.cmd.Process.Signal(os.Interrupt)
		_ = n.cmd.Wait()
		if t.Failed() {
			t.Logf("gpu-device-plugin dra on %s:\n%s", name, n.log.String())
		}
	})
	return n
}

// slices lists the node's ResourceSlices of driver gpu.nvidia.com.
func draSlices(t *testing.T, node string) []resourcev1.ResourceSlice {
	t.Helper()
	l, err := env.cs.ResourceV1().ResourceSlices().List(context.Background(), metav1.ListOptions{
		FieldSelector: resourcev1.ResourceSliceSelectorNodeName + "=" + node + "," + resourcev1.ResourceSliceSelectorDriver + "=" + config.DRADriverName})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

func sliceDevices(s []resourcev1.ResourceSlice) []resourcev1.Device {
	var out []resourcev1.Device
	for _, sl := range s {
		out = append(out, sl.Spec.Devices...)
	}
	return out
}

// TestDRA: the rendered DRA objects pass a server-side apply on the real API server; the DRA
// plugin publishes ResourceSlices for two kwok nodes (8 whole GPUs; 8 GPUs × 7 MIG devices)
// through its guardrails; the real kube-scheduler allocates claims written for NVIDIA's DRA
// driver (one GPU, a GPU with ≥ 40Gi, a MIG profile) and binds their pods; a claim nothing
// can satisfy stays pending.
func TestDRA(t *testing.T) {
	ctx := context.Background()
	objs := draStack(t)
	a, err := stack.NewApplier(env.cfg, "e2e-dra")
	if err != nil {
		t.Fatal(err)
	}
	// Every object passes a server-side apply (dry run, so names another stack of the suite
	// shares, like the RuntimeClass, stay untouched); the DRA objects are then applied for real.
	ns, dra := stack.DRAObjects(objs)
	kinds := map[string]bool{}
	for _, o := range objs {
		kinds[o.GetKind()] = true
	}
	for _, k := range []string{"DeviceClass", "DaemonSet", "ValidatingAdmissionPolicy", "ClusterRole"} {
		if !kinds[k] {
			t.Fatalf("the rendered DRA stack has no %s", k)
		}
	}
	if _, err := a.Apply(ctx, "dra namespace", ns); err != nil {
		t.Fatal(err)
	}
	if err := a.DryRun(ctx, objs); err != nil {
		t.Fatal(err)
	}
	t.Logf("server-side apply (dry run) accepted all %d rendered objects", len(objs))
	if _, err := a.Apply(ctx, "dra", dra); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, o := range dra {
			_ = a.Client().Delete(context.Background(), o)
		}
	})

	plain := startDRANode(t, "dra-gpus", "")
	start := time.Now()
	mig := startDRANode(t, "dra-mig", filepath.Join(env.repoRoot, "e2e", "testdata", "dra", "mig-state.json"))
	var migPublished time.Duration
	eventually(t, stageTimeout, "ResourceSlices of both nodes", func() (bool, string) {
		p, m := sliceDevices(draSlices(t, plain.name)), sliceDevices(draSlices(t, mig.name))
		if len(m) == 56 && migPublished == 0 {
			migPublished = time.Since(start)
		}
		return len(p) == 8 && len(m) == 56, fmt.Sprintf("%s: %d devices, %s: %d devices", plain.name, len(p), mig.name, len(m))
	})
	t.Logf("8 GPUs × 7 MIG devices published as ResourceSlices %s after the plugin started", migPublished.Round(time.Millisecond))
	for _, dev := range sliceDevices(draSlices(t, plain.name)) {
		for _, attr := range []resourcev1.QualifiedName{"type", "uuid", "productName", "brand", "architecture", "cudaComputeCapability", "driverVersion", "cudaDriverVersion", "pcieBusID", "index", "minor", "resource.kubernetes.io/pciBusID"} {
			if _, ok := dev.Attributes[attr]; !ok {
				t.Errorf("%s device %s lacks attribute %s", plain.name, dev.Name, attr)
			}
		}
		if _, ok := dev.Capacity["memory"]; !ok {
			t.Errorf("%s device %s lacks capacity memory", plain.name, dev.Name)
		}
	}

	t.Run("guardrails", func(t *testing.T) { draGuardrails(t, plain.name, mig.name) })

	wl := workloadNamespace(t)
	cases := []struct {
		name, class, selector, node string
	}{
		{"one-gpu", "gpu.nvidia.com", "", plain.name},
		{"gpu-40gi", "gpu.nvidia.com", "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0", plain.name},
		{"mig-1g5gb", "mig.nvidia.com", "device.attributes['gpu.nvidia.com'].profile == '1g.5gb'", mig.name},
		// A selector as NVIDIA's DRA driver documentation writes them, through the real
		// scheduler's CEL: its attribute names and types (versions compare with semver()).
		{"nvidia-selector", "gpu.nvidia.com", "device.attributes['gpu.nvidia.com'].architecture == 'Ampere' && " +
			"device.attributes['gpu.nvidia.com'].cudaComputeCapability.compareTo(semver('8.0.0')) >= 0 && " +
			"device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA A100') && " +
			"device.attributes['gpu.nvidia.com'].pcieBusID != '' && device.attributes['gpu.nvidia.com'].index >= 0", plain.name},
	}
	for _, c := range cases {
		createClaimPod(t, wl, c.name, c.class, c.selector)
	}
	createClaimPod(t, wl, "gpu-80gi", "gpu.nvidia.com", "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('80Gi')) >= 0")
	createClaimPod(t, wl, "wrong-class", "gpu.nvidia.co", "")
	for _, c := range cases {
		eventually(t, stageTimeout, "pod "+c.name+" bound with its claim allocated", func() (bool, string) {
			p, err := env.cs.CoreV1().Pods(wl).Get(ctx, "dra-"+c.name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			cl, err := env.cs.ResourceV1().ResourceClaims(wl).Get(ctx, "dra-"+c.name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if p.Spec.NodeName == "" || cl.Status.Allocation == nil {
				return false, fmt.Sprintf("node %q, allocation %v, conditions %v", p.Spec.NodeName, cl.Status.Allocation, p.Status.Conditions)
			}
			r := cl.Status.Allocation.Devices.Results
			if p.Spec.NodeName != c.node || len(r) != 1 || r[0].Driver != config.DRADriverName || r[0].Pool != c.node {
				return false, fmt.Sprintf("bound to %s with %+v, want a device of pool %s", p.Spec.NodeName, r, c.node)
			}
			return true, ""
		})
	}
	// Nothing publishes an 80Gi GPU: the claim stays unallocated and the pod unscheduled, and
	// the scheduler says why.
	time.Sleep(3 * time.Second)
	p, err := env.cs.CoreV1().Pods(wl).Get(ctx, "dra-gpu-80gi", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := env.cs.ResourceV1().ResourceClaims(wl).Get(ctx, "dra-gpu-80gi", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Spec.NodeName != "" || cl.Status.Allocation != nil {
		t.Fatalf("an 80Gi claim was satisfied: node %q, allocation %+v", p.Spec.NodeName, cl.Status.Allocation)
	}
	t.Logf("unsatisfiable claim: pod conditions %v", p.Status.Conditions)

	t.Run("sharing", func(t *testing.T) { draSharing(t, plain, wl) })

	// doctor (the binary, reading over plain REST) says why each claim stays unallocated.
	for pod, want := range map[string]string{
		"dra-gpu-80gi":    "no device of class gpu.nvidia.com satisfies its selector device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('80Gi')) >= 0",
		"dra-wrong-class": `names DeviceClass "gpu.nvidia.co", which does not exist`,
	} {
		eventually(t, stageTimeout, "doctor on "+pod, func() (bool, string) {
			out, err := exec.Command(filepath.Join(env.repoRoot, "bin", "gpupolicy-fn"), "doctor", "--kubeconfig", env.cluster.Kubeconfig,
				"--namespace", draNamespace, "--pod", wl+"/"+pod).CombinedOutput()
			return err != nil && strings.Contains(string(out), want), string(out)
		})
	}
}

// createClaimPod creates ResourceClaim dra-<name> (one device of class, optionally with a CEL
// selector and device configs) and pod dra-<name> that uses it.
func createClaimPod(t *testing.T, ns, name, class, selector string, configs ...resourcev1.DeviceClaimConfiguration) {
	t.Helper()
	ctx := context.Background()
	req := resourcev1.DeviceRequest{Name: "gpu", Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: class}}
	if selector != "" {
		req.Exactly.Selectors = []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{Expression: selector}}}
	}
	claim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: "dra-" + name, Namespace: ns},
		Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: []resourcev1.DeviceRequest{req}, Config: configs}}}
	if _, err := env.cs.ResourceV1().ResourceClaims(ns).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "dra-" + name, Namespace: ns},
		Spec: corev1.PodSpec{
			NodeSelector:   map[string]string{"gpupolicy.dev/e2e": "dra"},
			Tolerations:    []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &claim.Name}},
			Containers: []corev1.Container{{Name: "cuda", Image: "registry.invalid/cuda:e2e",
				Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "gpu"}}}}},
		},
	}
	if _, err := env.cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		zero := int64(0)
		_ = env.cs.CoreV1().Pods(ns).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		_ = env.cs.ResourceV1().ResourceClaims(ns).Delete(context.Background(), claim.Name, metav1.DeleteOptions{})
	})
}

// draGuardrails plays the DRA plugin's identity on node own and checks the rendered
// ResourceSlice guardrails: it may write its own node's slices of gpu.nvidia.com, not another
// node's, not another driver's, and not without the node-name claim.
func draGuardrails(t *testing.T, own, other string) {
	ctx := context.Background()
	plugin := clientFor(t, fakenode.AgentConfig(env.cfg, draNamespace, draPluginSA, own))
	noClaimCfg := fakenode.AgentConfig(env.cfg, draNamespace, draPluginSA, own)
	noClaimCfg.Impersonate.Extra = nil
	noClaim := clientFor(t, noClaimCfg)
	slice := func(name, node, driver string) *resourcev1.ResourceSlice {
		return &resourcev1.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourcev1.ResourceSliceSpec{
			Driver: driver, NodeName: &node, Pool: resourcev1.ResourcePool{Name: node, ResourceSliceCount: 1},
			Devices: []resourcev1.Device{{Name: "gpu-0"}}}}
	}
	create := func(c kubernetes.Interface, s *resourcev1.ResourceSlice) error {
		_, err := c.ResourceV1().ResourceSlices().Create(ctx, s, metav1.CreateOptions{})
		if err == nil {
			_ = env.cs.ResourceV1().ResourceSlices().Delete(ctx, s.Name, metav1.DeleteOptions{})
		}
		return err
	}
	cases := []struct {
		name    string
		c       kubernetes.Interface
		s       *resourcev1.ResourceSlice
		allowed bool
	}{
		{"own node, gpu.nvidia.com", plugin, slice("e2e-guard-own", own, config.DRADriverName), true},
		{"another node", plugin, slice("e2e-guard-other", other, config.DRADriverName), false},
		{"own node, another driver", plugin, slice("e2e-guard-driver", own, "other.example.com"), false},
		{"own node without the node-name claim", noClaim, slice("e2e-guard-noclaim", own, config.DRADriverName), false},
	}
	// The policy is loaded asynchronously after its binding: wait until it denies.
	eventually(t, stageTimeout, "ResourceSlice guardrails in force", func() (bool, string) {
		err := create(plugin, slice("e2e-guard-probe", other, config.DRADriverName))
		return apierrors.IsInvalid(err) || apierrors.IsForbidden(err), fmt.Sprint(err)
	})
	for _, c := range cases {
		err := create(c.c, c.s)
		switch {
		case c.allowed && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case !c.allowed && err == nil:
			t.Errorf("%s: allowed, want denied by %s", c.name, "gpupolicy-resourceslice-guardrails")
		case !c.allowed && !strings.Contains(err.Error(), "gpupolicy-resourceslice-guardrails"):
			t.Errorf("%s: refused, but not by the guardrails: %v", c.name, err)
		}
	}
	// The plugin's own slices are still there and untouched by the probes.
	if n := len(sliceDevices(draSlices(t, own))); n == 0 {
		t.Errorf("%s lost its published devices", own)
	}
}
