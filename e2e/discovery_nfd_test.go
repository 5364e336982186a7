package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/gpupolicy/gpupolicy/e2e/internal/cluster"
	"github.com/gpupolicy/gpupolicy/e2e/internal/fakenode"
	"github.com/gpupolicy/gpupolicy/e2e/internal/observers"
	"github.com/gpupolicy/gpupolicy/e2e/internal/stack"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

var (
	nodeFeatureGVR     = schema.GroupVersionResource{Group: "nfd.k8s-sigs.io", Version: "v1alpha1", Resource: "nodefeatures"}
	nodeFeatureRuleGVR = schema.GroupVersionResource{Group: "nfd.k8s-sigs.io", Version: "v1alpha1", Resource: "nodefeaturerules"}
)

const nfdNamespace = "node-feature-discovery"

// pciDevice is one element of NFD's pci.device feature, as nfd-worker's pci source reports it.
type pciDevice struct{ vendor, class, device string }

// TestDiscoveryOnRealNFD applies the NodeFeatureRule that spec.discovery: nfd renders to a
// control plane where the real nfd-master (v0.17.3) runs, and feeds it NodeFeature objects as
// nfd-worker writes them: a node with an NVIDIA 3D controller gets nvidia.com/gpu.present=true,
// nodes with only another vendor's display device or only an NVIDIA non-display device
// (an NVSwitch bridge) do not; when the GPU leaves the node's features, NFD removes the label.
// (nfd-worker itself reads the machine's PCI bus, which has no NVIDIA GPU here; its NodeFeature
// objects are written by the test in its format.)
func TestDiscoveryOnRealNFD(t *testing.T) {
	ctx := context.Background()
	peer := observerPeers(t)
	dir := filepath.Join(env.workDir, "nfd")
	c := ownControlPlane(t, dir, cluster.Options{})
	cfg := c.RESTConfig()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := stack.InstallMonitoringCRDs(ctx, cfg, peer.CRDs); err != nil {
		t.Fatalf("NFD's CRDs: %v", err)
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nfdNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The function's NodeFeatureRule, as rendered.
	objs, err := stack.RenderPolicy(ctx, filepath.Join(env.repoRoot, "bin", "gpupolicy-fn"),
		filepath.Join(env.repoRoot, "e2e", "testdata", "nfd", "policy.yaml"), filepath.Join(dir, "rendered"))
	if err != nil {
		t.Fatal(err)
	}
	var rule *unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "NodeFeatureRule" {
			rule = o
		}
		if o.GetKind() == "DaemonSet" && o.GetName() == "gpu-discovery" {
			t.Errorf("discovery: nfd rendered the builtin discovery DaemonSet too")
		}
	}
	if rule == nil {
		t.Fatal("discovery: nfd rendered no NodeFeatureRule")
	}
	if _, err := dyn.Resource(nodeFeatureRuleGVR).Create(ctx, rule, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the API server refused the rendered NodeFeatureRule (NFD's CRD schema): %v", err)
	}

	nodes := map[string][]pciDevice{
		"nfd-gpu":      {{"10de", "0302", "20b5"}, {"8086", "0600", "09a2"}}, // an A100 beside a host bridge
		"nfd-vga":      {{"1af4", "0300", "1050"}},                           // virtio-gpu: a display, not NVIDIA
		"nfd-nvswitch": {{"10de", "0680", "1af1"}},                           // NVIDIA, but a bridge
	}
	for name, devs := range nodes {
		if _, err := fakenode.Join(ctx, cs, fakenode.Spec{Name: name}); err != nil {
			t.Fatal(err)
		}
		writeNodeFeature(t, dyn, name, devs)
	}
	// The node nfd-master's pod would run on: a CPU node without a NodeFeature.
	if _, err := fakenode.Join(ctx, cs, fakenode.Spec{Name: "nfd-control-plane"}); err != nil {
		t.Fatal(err)
	}
	master, err := observers.StartNFDMaster(ctx, peer, dir, c.Kubeconfig, nfdNamespace, "nfd-control-plane")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(master.Stop)

	label := func(node string) (string, bool, string) {
		n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		v, ok := n.Labels[config.LabelGPUPresent]
		return v, ok, n.Labels[seenLabel]
	}
	// Every node processed (NFD applied its NodeFeature's own label), then the verdicts.
	eventually(t, 2*time.Minute, "nfd-master labelling the nodes", func() (bool, string) {
		var state string
		done := true
		for name := range nodes {
			v, ok, seen := label(name)
			state += fmt.Sprintf("%s: %s=%q (set %v), seen %q; ", name, config.LabelGPUPresent, v, ok, seen)
			done = done && seen == "true" && (name != "nfd-gpu" || v == "true")
		}
		return done, state + "log: " + master.Log
	})
	for _, name := range []string{"nfd-vga", "nfd-nvswitch"} {
		if v, ok, _ := label(name); ok {
			t.Errorf("%s has %s=%q, but has no NVIDIA display device", name, config.LabelGPUPresent, v)
		}
	}

	// The GPU leaves the node's features (nfd-worker's next report): NFD removes the label.
	writeNodeFeature(t, dyn, "nfd-gpu", []pciDevice{{"8086", "0600", "09a2"}})
	eventually(t, time.Minute, "nfd-master removing the label of a node without its GPU", func() (bool, string) {
		v, ok, _ := label("nfd-gpu")
		return !ok, fmt.Sprintf("%s=%q", config.LabelGPUPresent, v)
	})
}

// seenLabel is set through each NodeFeature's own labels, so the test knows nfd-master
// processed the node before it asserts a label's absence.
const seenLabel = "feature.node.kubernetes.io/e2e-seen"

// writeNodeFeature creates or replaces the node's NodeFeature as nfd-worker writes it: named
// after the node, in NFD's namespace, labelled with the node's name, with the pci.device
// instances.
func writeNodeFeature(t *testing.T, dyn dynamic.Interface, node string, devs []pciDevice) {
	t.Helper()
	ctx := context.Background()
	elements := make([]any, len(devs))
	for i, d := range devs {
		elements[i] = map[string]any{"attributes": map[string]any{"vendor": d.vendor, "class": d.class, "device": d.device}}
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "nfd.k8s-sigs.io/v1alpha1", "kind": "NodeFeature",
		"metadata": map[string]any{"name": node, "namespace": nfdNamespace,
			"labels": map[string]any{"nfd.node.kubernetes.io/node-name": node}},
		"spec": map[string]any{
			"features": map[string]any{"instances": map[string]any{"pci.device": map[string]any{"elements": elements}}},
			"labels":   map[string]any{seenLabel: "true"},
		},
	}}
	res := dyn.Resource(nodeFeatureGVR).Namespace(nfdNamespace)
	old, err := res.Get(ctx, node, metav1.GetOptions{})
	if err == nil {
		u.SetResourceVersion(old.GetResourceVersion())
		_, err = res.Update(ctx, u, metav1.UpdateOptions{})
	} else {
		_, err = res.Create(ctx, u, metav1.CreateOptions{})
	}
	if err != nil {
		t.Fatalf("NodeFeature %s: %v", node, err)
	}
}
