package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/fluxcd/pkg/ssa/utils"

	"github.com/gpupolicy/gpupolicy/e2e/internal/cluster"
	"github.com/gpupolicy/gpupolicy/e2e/internal/fakenode"
	"github.com/gpupolicy/gpupolicy/e2e/internal/operator"
	"github.com/gpupolicy/gpupolicy/e2e/internal/stack"
	"github.com/gpupolicy/gpupolicy/fn/doctor"
	"github.com/gpupolicy/gpupolicy/internal/peer"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

const (
	operatorNamespace = "gpu-operator"
	// operatorDevicePlugin is the operator's device-plugin DaemonSet (assets/state-device-plugin).
	operatorDevicePlugin = "nvidia-device-plugin-daemonset"
)

var clusterPolicyGVR = schema.GroupVersionResource{Group: "nvidia.com", Version: "v1", Resource: "clusterpolicies"}

// takeover is TestTakeOverFromGPUOperator's cluster: a control plane of its own (the suite's
// shared stack would land on the operator's nodes), NVIDIA's real GPU Operator running against
// it, and, once applied, gpupolicy's imported stack with its agents.
type takeover struct {
	dir   string
	chart string // the gpu-operator chart of the operator's version
	c     *cluster.Cluster
	cs    kubernetes.Interface
	dyn   dynamic.Interface
	op    *cluster.Server
	nodes []string // GPU nodes; the first is the canary
	ns    string   // gpupolicy's namespace
	stage map[string][]*appsv1.DaemonSet
	fleet *fakenode.Fleet
	agent *config.Agent
}

// TestTakeOverFromGPUOperator takes a cluster that runs NVIDIA's real GPU Operator (its
// ClusterPolicy from the chart's default values, GPU pods running on two kwok GPU nodes) over
// with the policy `gpupolicy-fn import` makes of its live objects, in the README's order:
// apply beside the running operator (the agents hold its nodes), stop it, hand the nodes over
// one by one, delete the ClusterPolicy. Asserted throughout: every GPU node has a running
// device plugin (sampled every 100 ms), no GPU pod is restarted, gpupolicy runs nothing on a
// node the operator still manages; at the end no object the ClusterPolicy owned remains, no
// node carries the operator's labels, and doctor finds nothing.
func TestTakeOverFromGPUOperator(t *testing.T) {
	ctx := context.Background()
	to := startTakeover(t, "takeover")

	// The operator's cluster: nodes with NFD's labels, the ClusterPolicy of the chart's defaults.
	to.nodes = []string{"takeover-gpu-1", "takeover-gpu-2"}
	for _, n := range to.nodes {
		to.joinNode(t, n, true)
	}
	to.joinNode(t, "takeover-cpu", false)
	to.applyChartClusterPolicy(t)
	for _, n := range to.nodes {
		to.waitOperatorPlugin(t, n)
		// The operator's device plugin registers the node's GPUs with the kubelet (a stand-in:
		// kwok runs no program); gpupolicy's fake device manager takes over from here.
		to.patchNodeStatus(t, n, map[string]any{
			"capacity":    map[string]string{"nvidia.com/gpu": fmt.Sprint(fakenode.GPUsPerNode)},
			"allocatable": map[string]string{"nvidia.com/gpu": fmt.Sprint(fakenode.GPUsPerNode)},
		})
	}
	if got := to.nodeLabels(t, "takeover-cpu")[config.LabelGPUPresent]; got != "" {
		t.Fatalf("the operator labelled the CPU node %s=%s", config.LabelGPUPresent, got)
	}
	gpuPods := map[string]types.UID{}
	for _, n := range to.nodes {
		p := to.gpuPod(t, "train-"+n, n)
		gpuPods[p.Name] = p.UID
	}

	// 1. Import the live objects; render; apply beside the running operator. From here to the
	// end every GPU node must have a device plugin and never run both stacks' stages.
	policy := to.importLive(t)
	to.apply(t, policy)
	stop := to.watchTakeover(t)
	for _, n := range to.nodes {
		to.waitCondition(t, n, corev1.ConditionFalse, config.ReasonGPUOperatorManaged)
	}
	for _, n := range to.nodes {
		if p := to.ourStagePods(t, n); len(p) > 0 {
			t.Errorf("%s: gpupolicy stage pods beside the operator's: %v", n, p)
		}
		if node := to.node(t, n); node.Labels[config.LabelOperatorValidator] == "" || node.Annotations[config.AnnotationGateStatus] != "" {
			t.Errorf("%s: the agent wrote to a held node: labels %v, annotations %v", n, node.Labels, node.Annotations)
		}
	}
	r := to.doctor(t)
	wantFinding(t, r.Cluster, "gpu-operator", "cluster-policy")
	wantFinding(t, r.Cluster, "runtimeclass-owner", "kubectl patch runtimeclass")
	for _, n := range r.Nodes {
		wantFinding(t, n.Findings, "gpu-operator", config.LabelOperatorOperands+"=false")
	}

	// 2. Hand over.
	to.removeRuntimeClassOwner(t)
	to.op.Stop() // kubectl -n gpu-operator scale deployment gpu-operator --replicas=0
	for i, n := range to.nodes {
		to.label(t, n, config.LabelOperatorOperands, "false")
		// Adopted, then verified by gpupolicy's own stages: its device plugin runs there.
		to.waitOurDevicePlugin(t, n)
		to.waitCondition(t, n, corev1.ConditionTrue, config.ReasonStackReady)
		if i == 0 {
			// The canary alone: the next node is still the operator's.
			if p := to.ourStagePods(t, to.nodes[1]); len(p) > 0 || to.nodeLabels(t, to.nodes[1])[config.LabelOperatorValidator] == "" {
				t.Errorf("%s changed with the canary %s: gpupolicy pods %v, labels %v", to.nodes[1], n, p, to.nodeLabels(t, to.nodes[1]))
			}
		}
	}
	if err := to.dyn.Resource(clusterPolicyGVR).Delete(ctx, "cluster-policy", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	to.waitNoOperatorObjects(t)
	if bad := stop(); len(bad) > 0 {
		t.Errorf("during the takeover:\n%s", strings.Join(bad, "\n"))
	}

	// 3. Verify: the same GPU pods, no operator label, doctor clean, the RuntimeClass kept, and
	// a new GPU pod runs on gpupolicy's device plugin.
	for name, uid := range gpuPods {
		p, err := to.cs.CoreV1().Pods("workloads").Get(ctx, name, metav1.GetOptions{})
		if err != nil || p.UID != uid || p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			t.Errorf("GPU pod %s: %v, want the same pod (uid %s) running: %+v", name, err, uid, p.Status)
		}
	}
	for _, n := range to.nodes {
		l := to.nodeLabels(t, n)
		for _, k := range append(slices.Clone(config.OperatorOnlyLabels), config.OperatorUpgradeStateLabel) {
			if v, ok := l[k]; ok {
				t.Errorf("%s: the operator's label %s=%s is left", n, k, v)
			}
		}
		for _, k := range []string{config.AnnotationAdoptedGates, config.OperatorUpgradeAnnotation} {
			if v, ok := to.node(t, n).Annotations[k]; ok {
				t.Errorf("%s: annotation %s=%s is left after gpupolicy verified the node", n, k, v)
			}
		}
	}
	if _, err := to.cs.NodeV1().RuntimeClasses().Get(ctx, to.agent.Toolkit.RuntimeClassName, metav1.GetOptions{}); err != nil {
		t.Errorf("RuntimeClass %s after the ClusterPolicy went: %v", to.agent.Toolkit.RuntimeClassName, err)
	}
	to.gpuPod(t, "after-"+to.nodes[0], to.nodes[0])
	r = to.doctor(t)
	for _, f := range r.Cluster {
		t.Errorf("doctor after the takeover: %+v", f)
	}
	for _, n := range r.Nodes {
		for _, f := range n.Findings {
			t.Errorf("doctor after the takeover, node %s: %+v", n.Name, f)
		}
	}
}

func startTakeover(t *testing.T, name string) *takeover {
	t.Helper()
	ctx := context.Background()
	peerBuild, err := operator.Ensure(filepath.Join(env.repoRoot, "e2e", "hack", "build-operator.sh"))
	if err != nil {
		t.Fatal(err)
	}
	to := &takeover{dir: filepath.Join(env.workDir, name), chart: peerBuild.Chart}
	to.c = ownControlPlane(t, to.dir, cluster.Options{})
	cfg := to.c.RESTConfig()
	if to.cs, err = kubernetes.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if to.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if err := stack.InstallMonitoringCRDs(ctx, cfg, filepath.Join(env.repoRoot, "e2e", "testdata", "crds")); err != nil {
		t.Fatal(err)
	}
	if err := stack.InstallMonitoringCRDs(ctx, cfg, peerBuild.CRDs); err != nil {
		t.Fatalf("the GPU Operator's CRDs: %v", err)
	}
	for _, ns := range []string{operatorNamespace, "workloads"} {
		if _, err := to.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	kc := filepath.Join(to.dir, "operator-kubeconfig")
	if err := fakenode.WriteKubeconfig(kc, cfg); err != nil {
		t.Fatal(err)
	}
	kcBytes, err := os.ReadFile(kc)
	if err != nil {
		t.Fatal(err)
	}
	if to.op, err = operator.Start(ctx, peerBuild, filepath.Join(to.dir, "operator-root"), kcBytes, operatorNamespace, filepath.Join(to.c.LogDir, "gpu-operator.log")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(to.op.Stop)
	t.Logf("gpu-operator %s running chrooted in %s", peerBuild.Version, filepath.Join(to.dir, "operator-root"))
	return to
}

// joinNode registers a kwok node. A GPU node carries what the operator keys on: NFD's NVIDIA
// PCI, kernel and OS labels, and the labels the operator's gpu-feature-discovery writes (the
// driver and CUDA versions import reads; kwok runs no GFD program).
func (to *takeover) joinNode(t *testing.T, name string, gpu bool) {
	t.Helper()
	ctx := context.Background()
	labels := map[string]string{
		"feature.node.kubernetes.io/kernel-version.full":          "5.15.0-1057-generic",
		"feature.node.kubernetes.io/system-os_release.ID":         "ubuntu",
		"feature.node.kubernetes.io/system-os_release.VERSION_ID": "22.04",
	}
	if gpu {
		labels["feature.node.kubernetes.io/pci-10de.present"] = "true"
		labels[config.LabelCUDADriverFull] = "580.82.07"
		labels["nvidia.com/cuda.runtime-version.major"] = "13"
		labels["nvidia.com/cuda.runtime-version.minor"] = "0"
	}
	if _, err := fakenode.Join(ctx, to.cs, fakenode.Spec{Name: name, Labels: labels}); err != nil {
		t.Fatal(err)
	}
	if err := fakenode.WaitReady(ctx, to.cs, name, time.Minute); err != nil {
		t.Fatal(err)
	}
	// The kubelet's and containerd's versions, as a real node reports them (import reads them).
	to.patchNodeStatus(t, name, map[string]any{"nodeInfo": map[string]string{
		"kubeletVersion": "v1.33.4", "containerRuntimeVersion": "containerd://2.1.4"}})
}

func (to *takeover) patchNodeStatus(t *testing.T, node string, status map[string]any) {
	t.Helper()
	patch, _ := json.Marshal(map[string]any{"status": status})
	if _, err := to.cs.CoreV1().Nodes().PatchStatus(context.Background(), node, patch); err != nil {
		t.Fatal(err)
	}
}

func (to *takeover) label(t *testing.T, node, key, value string) {
	t.Helper()
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]string{key: value}}})
	if _, err := to.cs.CoreV1().Nodes().Patch(context.Background(), node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (to *takeover) node(t *testing.T, name string) *corev1.Node {
	t.Helper()
	n, err := to.cs.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (to *takeover) nodeLabels(t *testing.T, name string) map[string]string {
	t.Helper()
	return to.node(t, name).Labels
}

// applyChartClusterPolicy renders the chart's ClusterPolicy from its default values with the
// real helm and creates it, as `helm install gpu-operator` does.
func (to *takeover) applyChartClusterPolicy(t *testing.T, edits ...func(*unstructured.Unstructured)) {
	t.Helper()
	cmd := exec.Command(peer.Helm(t), "template", "gpu-operator", to.chart, "--namespace", operatorNamespace,
		"--show-only", "templates/clusterpolicy.yaml")
	home := filepath.Join(to.dir, "helm")
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, errb.String())
	}
	objs, err := utils.ReadObjects(bytes.NewReader(out))
	if err != nil || len(objs) != 1 || objs[0].GetKind() != "ClusterPolicy" {
		t.Fatalf("helm template gave %d objects (%v), want one ClusterPolicy", len(objs), err)
	}
	for _, edit := range edits {
		edit(objs[0])
	}
	if _, err := to.dyn.Resource(clusterPolicyGVR).Create(context.Background(), objs[0], metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitOperatorPlugin waits until the operator labelled node and its device plugin runs there.
func (to *takeover) waitOperatorPlugin(t *testing.T, node string) {
	t.Helper()
	eventually(t, 2*time.Minute, "the GPU Operator's device plugin running on "+node, func() (bool, string) {
		l := to.nodeLabels(t, node)
		return l[config.LabelOperatorValidator] == "true" && len(to.operatorPlugins(t)[node]) > 0, fmt.Sprint(l)
	})
}

// operatorPlugins maps node → the operator's running device plugin pods there.
func (to *takeover) operatorPlugins(t *testing.T) map[string][]string {
	t.Helper()
	return to.runningPods(t, operatorNamespace, func(owner string) bool { return owner == operatorDevicePlugin })
}

// runningPods maps node → running, not terminating pods in ns whose DaemonSet owner matches.
func (to *takeover) runningPods(t *testing.T, ns string, owner func(string) bool) map[string][]string {
	t.Helper()
	pods, err := to.cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Error(err)
		return nil
	}
	out := map[string][]string{}
	for _, p := range pods.Items {
		ref := metav1.GetControllerOf(&p)
		if ref == nil || ref.Kind != "DaemonSet" || !owner(ref.Name) || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
			continue
		}
		out[p.Spec.NodeName] = append(out[p.Spec.NodeName], ns+"/"+p.Name)
	}
	return out
}

// gpuPod runs pod name with one GPU on node, under RuntimeClass nvidia, and waits until it runs.
func (to *takeover) gpuPod(t *testing.T, name, node string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	eventually(t, time.Minute, "default ServiceAccount in workloads", func() (bool, string) {
		_, err := to.cs.CoreV1().ServiceAccounts("workloads").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, fmt.Sprint(err)
	})
	rc := "nvidia"
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "workloads"},
		Spec: corev1.PodSpec{
			RuntimeClassName: &rc,
			NodeSelector:     map[string]string{"kubernetes.io/hostname": node},
			Containers: []corev1.Container{{Name: "cuda", Image: "nvcr.io/nvidia/cuda:12.8.0-base-ubuntu24.04", Command: []string{"sleep", "infinity"},
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resourceapi.MustParse("1")}}}},
		},
	}
	p, err := to.cs.CoreV1().Pods("workloads").Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "GPU pod running on "+node, func() (bool, string) {
		got, err := to.cs.CoreV1().Pods("workloads").Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		p = got
		return p.Status.Phase == corev1.PodRunning, podState(p)
	})
	return p
}

// importLive is the README's step 1 on the live cluster: the ClusterPolicy, NVIDIADrivers
// (none here) and Nodes as `kubectl get -o yaml` prints them, through `gpupolicy-fn import`.
func (to *takeover) importLive(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	cps, err := to.dyn.Resource(clusterPolicyGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var items []any
	for _, cp := range cps.Items {
		items = append(items, cp.Object)
	}
	nodes, err := to.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes.Items {
		n.APIVersion, n.Kind = "v1", "Node"
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&n)
		if err != nil {
			t.Fatal(err)
		}
		items = append(items, u)
	}
	b, err := yaml.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
	if err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(to.dir, "operator.yaml")
	if err := os.WriteFile(in, b, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(env.repoRoot, "bin", "gpupolicy-fn"), "import", "-f", in)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("gpupolicy-fn import -f %s: %v\n%s", in, err, errb.String())
	}
	t.Logf("import reported:\n%s", errb.String())
	policy := filepath.Join(to.dir, "gpupolicy.yaml")
	if err := os.WriteFile(policy, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return policy
}

// apply renders the policy and applies it wave by wave, as Argo CD syncs it, then starts the
// node side: each GPU node's host has the operator's driver loaded and an NVIDIA GPU, and its
// toolkit installs when gpupolicy's toolkit pod runs there.
func (to *takeover) apply(t *testing.T, policy string) {
	t.Helper()
	ctx := context.Background()
	objs, err := stack.RenderPolicy(ctx, filepath.Join(env.repoRoot, "bin", "gpupolicy-fn"), policy, filepath.Join(to.dir, "rendered"))
	if err != nil {
		t.Fatal(err)
	}
	waves, err := stack.ByWave(objs)
	if err != nil {
		t.Fatal(err)
	}
	a, err := stack.NewApplier(to.c.RESTConfig(), "argocd-controller")
	if err != nil {
		t.Fatal(err)
	}
	parts, err := nodeSideOf(objs)
	if err != nil {
		t.Fatal(err)
	}
	to.ns, to.stage = parts.agent.Namespace, parts.stages
	if to.fleet, err = fakenode.NewFleet(to.c.RESTConfig(), filepath.Join(env.repoRoot, "bin", "gpu-node-agent"), parts.agent, to.stage, parts.config, filepath.Join(to.dir, "agents")); err != nil {
		t.Fatal(err)
	}
	to.agent = to.fleet.Config()
	for _, n := range to.nodes {
		h, err := to.fleet.AddHost(n, true)
		if err != nil {
			t.Fatal(err)
		}
		if err := errors.Join(h.SetDriver(to.agent.Driver.Version), h.AddGPU("0000:07:00.0")); err != nil {
			t.Fatal(err)
		}
	}
	fctx, cancel := context.WithCancel(ctx)
	t.Cleanup(func() {
		cancel()
		to.fleet.Stop()
		for _, err := range to.fleet.Errors("") {
			t.Errorf("fleet: %v", err)
		}
	})
	if err := to.fleet.Start(fctx); err != nil {
		t.Fatal(err)
	}
	for _, w := range waves {
		if _, err := a.Apply(ctx, fmt.Sprintf("wave %d", w.Number), w.Objects); err != nil {
			t.Fatal(err)
		}
	}
}

// ourStagePods lists gpupolicy's gated pods on node.
func (to *takeover) ourStagePods(t *testing.T, node string) []string {
	t.Helper()
	var out []string
	for _, dss := range to.stage {
		for _, ds := range dss {
			out = append(out, to.runningPods(t, to.ns, func(o string) bool { return o == ds.Name })[node]...)
		}
	}
	slices.Sort(out)
	return out
}

func (to *takeover) ourPlugins(t *testing.T) map[string][]string {
	t.Helper()
	names := map[string]bool{}
	for _, ds := range to.stage[config.LabelDeployDevicePlugin] {
		names[ds.Name] = true
	}
	return to.runningPods(t, to.ns, func(o string) bool { return names[o] })
}

func (to *takeover) waitOurDevicePlugin(t *testing.T, node string) {
	t.Helper()
	eventually(t, 2*time.Minute, "gpupolicy's device plugin running on "+node, func() (bool, string) {
		n := to.node(t, node)
		return len(to.ourPlugins(t)[node]) > 0, fmt.Sprint(n.Labels, " ", n.Annotations[config.AnnotationAdoptedGates])
	})
}

func (to *takeover) waitCondition(t *testing.T, node string, status corev1.ConditionStatus, reason string) {
	t.Helper()
	eventually(t, 2*time.Minute, fmt.Sprintf("%s: %s=%s (%s)", node, config.ConditionGPUStackReady, status, reason), func() (bool, string) {
		for _, c := range to.node(t, node).Status.Conditions {
			if c.Type == config.ConditionGPUStackReady {
				return c.Status == status && c.Reason == reason, fmt.Sprintf("%+v", c)
			}
		}
		return false, "no condition"
	})
}

// watchTakeover samples the cluster every 100 ms until the returned stop is called, and stop
// returns what went wrong in between: a GPU node without a running device plugin (the
// operator's or gpupolicy's), and a node where gpupolicy ran a stage pod while the operator
// still managed it (labelled by both). Each stretch is reported once, with its length.
func (to *takeover) watchTakeover(t *testing.T) (stop func() []string) {
	t.Helper()
	ctx := context.Background()
	type stretch struct {
		from, to time.Time
		what     string
	}
	var (
		open    = map[string]*stretch{} // node+what → the stretch going on
		closed  []stretch
		samples int
	)
	note := func(now time.Time, key, what string, bad bool) {
		s := open[key]
		switch {
		case bad && s == nil:
			open[key] = &stretch{from: now, to: now, what: what}
		case bad:
			s.to = now
		case s != nil:
			closed = append(closed, *s)
			delete(open, key)
		}
	}
	ours := map[string]bool{}
	for _, dss := range to.stage {
		for _, ds := range dss {
			ours[ds.Name] = true
		}
	}
	plugins := map[string]bool{operatorDevicePlugin: true}
	for _, ds := range to.stage[config.LabelDeployDevicePlugin] {
		plugins[ds.Name] = true
	}
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			now := time.Now()
			pods, err1 := to.cs.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
			nodes, err2 := to.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			if err := errors.Join(err1, err2); err == nil {
				samples++
				plugin, stage := map[string]bool{}, map[string][]string{}
				for _, p := range pods.Items {
					ref := metav1.GetControllerOf(&p)
					if ref == nil || ref.Kind != "DaemonSet" || p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
						continue
					}
					plugin[p.Spec.NodeName] = plugin[p.Spec.NodeName] || plugins[ref.Name]
					if p.Namespace == to.ns && ours[ref.Name] {
						stage[p.Spec.NodeName] = append(stage[p.Spec.NodeName], ref.Name)
					}
				}
				for _, n := range nodes.Items {
					if !slices.Contains(to.nodes, n.Name) {
						continue
					}
					note(now, n.Name+" plugin", n.Name+": no device plugin running", !plugin[n.Name])
					_, managed := n.Labels[config.LabelOperatorValidator]
					note(now, n.Name+" both", fmt.Sprintf("%s: gpupolicy's %v beside the GPU Operator (%s)", n.Name, stage[n.Name], config.LabelOperatorValidator),
						managed && len(stage[n.Name]) > 0)
				}
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() []string {
		close(done)
		<-finished
		for _, s := range open {
			closed = append(closed, *s)
		}
		t.Logf("the takeover sampled %d times", samples)
		var out []string
		for _, s := range closed {
			out = append(out, fmt.Sprintf("%s, from %s for %s", s.what, s.from.Format("15:04:05.000"), s.to.Sub(s.from).Round(time.Millisecond)))
		}
		slices.Sort(out)
		return out
	}
}

// removeRuntimeClassOwner is the README's patch: the operator's RuntimeClass, now also
// gpupolicy's, outlives the ClusterPolicy.
func (to *takeover) removeRuntimeClassOwner(t *testing.T) {
	t.Helper()
	patch := []byte(`[{"op":"remove","path":"/metadata/ownerReferences"}]`)
	if _, err := to.cs.NodeV1().RuntimeClasses().Patch(context.Background(), to.agent.Toolkit.RuntimeClassName, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("kubectl patch runtimeclass %s: %v", to.agent.Toolkit.RuntimeClassName, err)
	}
}

// operatorOwnedKinds are the kinds the operator's state manifests create (assets/), which the
// ClusterPolicy owns.
var operatorOwnedKinds = []schema.GroupVersionResource{
	{Group: "apps", Version: "v1", Resource: "daemonsets"},
	{Group: "apps", Version: "v1", Resource: "deployments"},
	{Version: "v1", Resource: "configmaps"},
	{Version: "v1", Resource: "serviceaccounts"},
	{Version: "v1", Resource: "services"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "roles"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "rolebindings"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
	{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
	{Group: "node.k8s.io", Version: "v1", Resource: "runtimeclasses"},
	{Group: "monitoring.coreos.com", Version: "v1", Resource: "servicemonitors"},
	{Group: "monitoring.coreos.com", Version: "v1", Resource: "prometheusrules"},
}

// waitNoOperatorObjects waits until the garbage collector removed everything the deleted
// ClusterPolicy owned, and every pod of its DaemonSets.
func (to *takeover) waitNoOperatorObjects(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	eventually(t, 2*time.Minute, "no object of the GPU Operator's left", func() (bool, string) {
		var left []string
		for _, gvr := range operatorOwnedKinds {
			list, err := to.dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err.Error()
			}
			for _, o := range list.Items {
				if slices.ContainsFunc(o.GetOwnerReferences(), func(r metav1.OwnerReference) bool { return r.Kind == "ClusterPolicy" }) {
					left = append(left, gvr.Resource+" "+o.GetNamespace()+"/"+o.GetName())
				}
			}
		}
		pods, err := to.cs.CoreV1().Pods(operatorNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, p := range pods.Items {
			left = append(left, "pod "+p.Namespace+"/"+p.Name)
		}
		return len(left) == 0, fmt.Sprint(left)
	})
}

// doctor runs what `gpupolicy-fn doctor -o json` runs, over the cluster's kubeconfig.
func (to *takeover) doctor(t *testing.T) *doctor.Report {
	t.Helper()
	var out, errb bytes.Buffer
	code := doctor.Run(context.Background(), doctor.Options{Kubeconfig: to.c.Kubeconfig, Namespace: to.ns, Format: "json"}, &out, &errb)
	if code == doctor.ExitFailed {
		t.Fatalf("doctor exited %d: %s", code, errb.String())
	}
	var r doctor.Report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("doctor -o json: %v\n%s", err, out.String())
	}
	return &r
}

func wantFinding(t *testing.T, fs []doctor.Finding, check, text string) {
	t.Helper()
	for _, f := range fs {
		if f.Check == check && strings.Contains(f.Message+" "+f.Fix, text) {
			return
		}
	}
	t.Errorf("doctor: no %s finding mentioning %q in %+v", check, text, fs)
}
