package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fluxcd/pkg/ssa/utils"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/gpupolicy/gpupolicy/e2e/internal/cluster"
	"github.com/gpupolicy/gpupolicy/e2e/internal/fakenode"
	"github.com/gpupolicy/gpupolicy/e2e/internal/gitops"
	"github.com/gpupolicy/gpupolicy/e2e/internal/stack"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// The fleet of TestFleet*: two pools of GPU nodes, two of them on another driver branch (the
// "535 on the March nodes" of the source document), one whose toolkit install fails, and a
// CPU node. Every other GPU node must get the whole stack, whatever the bad ones do.
const (
	fleetDriftedVersion = "570.172.08"
	fleetToolkitFailure = "containerd did not load runtime nvidia: exec: runc: not found (e2e)"
)

type fleetNode struct {
	name, pool         string
	drifted, toolkitKO bool
	cpu                bool
}

func (n fleetNode) heldBack() bool { return n.drifted || n.toolkitKO }

// fleetNodes is the fleet with per GPU pool size and the bad nodes spread over both pools.
func fleetNodes(prefix string, perPool int, drifted, toolkitKO []int) []fleetNode {
	var out []fleetNode
	i := 0
	for _, pool := range []string{"inference", "training"} {
		for j := 0; j < perPool; j++ {
			n := fleetNode{name: fmt.Sprintf("%s-%s-%02d", prefix, pool[:3], j+1), pool: pool}
			for _, d := range drifted {
				n.drifted = n.drifted || d == i
			}
			for _, k := range toolkitKO {
				n.toolkitKO = n.toolkitKO || k == i
			}
			out = append(out, n)
			i++
		}
	}
	return append(out, fleetNode{name: prefix + "-cpu", cpu: true})
}

// fleetEnv is a control plane of its own (the GitOps engine owns every object of the stack,
// so it cannot share the suite's), with kwok holding the driver validators' readiness and the
// fleet of agents, validators and discovery processes playing the nodes.
type fleetEnv struct {
	name      string
	dir       string
	c         *cluster.Cluster
	cfg       *rest.Config
	cs        kubernetes.Interface
	nodes     []fleetNode
	hosts     map[string]*fakenode.Host
	fleet     *fakenode.Fleet
	readiness *fakenode.Readiness
	ns        string
	policy    []byte // the Flux policy
	cancel    context.CancelFunc
	// upgradeLease > 0: the fleet plays driver upgrades with this slot lease duration.
	upgradeLease time.Duration

	mu         sync.Mutex
	violations []string // a later gate seen open on a held-back node
}

var (
	gitopsOnce sync.Once
	gitopsBins *gitops.Binaries
	gitopsErr  error
)

func gitopsBinaries(t *testing.T) *gitops.Binaries {
	t.Helper()
	gitopsOnce.Do(func() {
		gitopsBins, gitopsErr = gitops.EnsureBinaries(filepath.Join(env.repoRoot, "e2e", "hack", "build-gitops.sh"))
	})
	if gitopsErr != nil {
		t.Fatal(gitopsErr)
	}
	return gitopsBins
}

// newFleetEnv starts the control plane (monitoring and Flux CRDs installed) and the node side
// for nodes: each GPU node's host has an NVIDIA GPU on its PCI bus and its driver loaded (the
// drifted ones on another branch), the toolkit installs itself when its pod runs (or records a
// failure); the driver validators' readiness follows rule.
func newFleetEnv(t *testing.T, name string, nodes []fleetNode, rule fakenode.ReadinessRule) *fleetEnv {
	t.Helper()
	policy, err := os.ReadFile(filepath.Join(env.repoRoot, "e2e", "testdata", "fleet", "gpupolicy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return newFleetEnvWith(t, name, nodes, rule, policy, 0)
}

// newFleetEnvWith is newFleetEnv for a policy of the test's; upgradeLease > 0 makes the fleet
// play driver upgrades (fakenode.Fleet.EnableUpgrades) with that slot lease duration.
func newFleetEnvWith(t *testing.T, name string, nodes []fleetNode, rule fakenode.ReadinessRule, policy []byte, upgradeLease time.Duration) *fleetEnv {
	t.Helper()
	ctx := context.Background()
	fe := &fleetEnv{name: name, dir: filepath.Join(env.workDir, name), nodes: nodes, hosts: map[string]*fakenode.Host{},
		policy: policy, upgradeLease: upgradeLease}
	fe.c = ownControlPlane(t, fe.dir, cluster.Options{UnreadyContainers: []string{fakenode.ValidatorContainer}})
	var err error
	fe.cfg = fe.c.RESTConfig()
	fe.cfg.QPS, fe.cfg.Burst = 100, 200
	if fe.cs, err = kubernetes.NewForConfig(fe.cfg); err != nil {
		t.Fatal(err)
	}
	if err := stack.InstallMonitoringCRDs(ctx, fe.cfg, filepath.Join(env.repoRoot, "e2e", "testdata", "crds")); err != nil {
		t.Fatal(err)
	}
	if err := stack.InstallMonitoringCRDs(ctx, fe.cfg, gitopsBinaries(t).FluxCRDs); err != nil {
		t.Fatalf("Flux CRDs: %v", err)
	}
	if _, err := fe.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: gitops.FluxNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	objs := fe.objects(t, fe.render(t, string(fe.policy), "GitRepository/fleet"))
	fe.startFleet(t, objs, rule)
	for _, n := range nodes {
		fe.addNode(t, n)
	}
	for _, n := range nodes {
		if err := fakenode.WaitReady(ctx, fe.cs, n.name, 2*time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	return fe
}

// render writes the policy's tree (gitops as the policy says) into a new directory and
// returns the directory that holds gpu/.
func (fe *fleetEnv) render(t *testing.T, policy, source string) string {
	t.Helper()
	dir, err := os.MkdirTemp(fe.dir, "render-")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "gpupolicy.yaml")
	if err := os.WriteFile(p, []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"render", "-f", p, "-o", filepath.Join(dir, "gpu")}
	if strings.Contains(policy, "\n  gitops: flux\n") {
		args = append(args, "--flux-path", "gpu", "--flux-source", source)
	}
	if out, err := exec.Command(filepath.Join(env.repoRoot, "bin", "gpupolicy-fn"), args...).CombinedOutput(); err != nil {
		t.Fatalf("gpupolicy-fn render: %v\n%s", err, out)
	}
	if err := os.Remove(p); err != nil { // the artifact holds the rendered tree only
		t.Fatal(err)
	}
	return dir
}

// objects reads the stack's objects from a rendered tree's stage directories.
func (fe *fleetEnv) objects(t *testing.T, root string) []*unstructured.Unstructured {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "gpu", "0*", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no rendered stage files under %s (%v)", root, err)
	}
	var objs []*unstructured.Unstructured
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		r, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		o, err := utils.ReadObjects(r)
		r.Close()
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		objs = append(objs, o...)
	}
	return objs
}

func (fe *fleetEnv) startFleet(t *testing.T, objs []*unstructured.Unstructured, rule fakenode.ReadinessRule) {
	t.Helper()
	parts, err := nodeSideOf(objs)
	if err != nil {
		t.Fatal(err)
	}
	if parts.discovery == nil {
		t.Fatal("the rendered fleet has no gpu-discovery DaemonSet")
	}
	fe.ns = parts.agent.Namespace
	f, err := fakenode.NewFleet(fe.cfg, filepath.Join(env.repoRoot, "bin", "gpu-node-agent"), parts.agent, parts.stages, parts.config, filepath.Join(fe.dir, "agents"))
	if err != nil {
		t.Fatal(err)
	}
	f.EnableDiscovery(parts.discovery)
	if fe.upgradeLease > 0 {
		f.EnableUpgrades(fe.upgradeLease)
	}
	ctx, cancel := context.WithCancel(context.Background())
	fe.fleet, fe.cancel = f, cancel
	t.Cleanup(func() {
		cancel()
		if fe.readiness != nil {
			fe.readiness.Stop()
		}
		f.Stop()
		for _, err := range f.Errors("") {
			t.Errorf("fleet: %v", err)
		}
	})
	if err := f.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if fe.readiness, err = f.MirrorReadiness(ctx, rule); err != nil {
		t.Fatal(err)
	}
	fe.watchGates(t, ctx)
}

// addNode prepares the node's host and registers the node with kwok.
func (fe *fleetEnv) addNode(t *testing.T, n fleetNode) {
	t.Helper()
	h, err := fe.fleet.AddHost(n.name, !n.cpu && !n.toolkitKO)
	if err != nil {
		t.Fatal(err)
	}
	fe.hosts[n.name] = h
	if n.cpu { // a host bridge, no NVIDIA function
		if err := h.AddPCIDevice("0000:00:00.0", "0x8086", "0x060000"); err != nil {
			t.Fatal(err)
		}
	} else {
		want, _ := fe.fleet.Config().DriverFor(map[string]string{"gpupolicy.dev/pool": n.pool})
		version := want.Version
		if n.drifted {
			version = fleetDriftedVersion
		}
		if err := h.SetDriver(version); err != nil {
			t.Fatal(err)
		}
		if err := h.AddGPU("0000:07:00.0"); err != nil {
			t.Fatal(err)
		}
	}
	if n.toolkitKO {
		if err := h.FailToolkit(fleetToolkitFailure); err != nil {
			t.Fatal(err)
		}
	}
	labels := map[string]string{}
	if n.pool != "" {
		labels["gpupolicy.dev/pool"] = n.pool
	}
	if _, err := fakenode.Join(context.Background(), fe.cs, fakenode.Spec{Name: n.name, GPU: !n.cpu && !strings.HasSuffix(n.name, "-new"), Labels: labels}); err != nil {
		t.Fatal(err)
	}
}

// laterGates are the gates a node must not get when the stage before is held back.
func laterGates(n fleetNode) []string {
	switch {
	case n.drifted:
		return []string{config.LabelDeployToolkit, config.LabelToolkitReady, config.LabelDeployDevicePlugin, config.LabelDeployFeatureDiscovery, config.LabelDeployExporter}
	case n.toolkitKO:
		return []string{config.LabelToolkitReady, config.LabelDeployDevicePlugin, config.LabelDeployFeatureDiscovery, config.LabelDeployExporter}
	}
	return nil
}

// watchGates records every moment a held-back node carries a later gate "true", for the
// whole test: "none of them had a later gate opened" is a statement about every state.
func (fe *fleetEnv) watchGates(t *testing.T, ctx context.Context) {
	t.Helper()
	byName := map[string]fleetNode{}
	for _, n := range fe.nodes {
		byName[n.name] = n
	}
	check := func(o any) {
		node, ok := o.(*corev1.Node)
		if !ok {
			return
		}
		n, ok := byName[node.Name]
		if !ok || !n.heldBack() {
			return
		}
		for _, g := range laterGates(n) {
			if node.Labels[g] == "true" {
				fe.mu.Lock()
				fe.violations = append(fe.violations, fmt.Sprintf("%s had %s=true (resourceVersion %s)", node.Name, g, node.ResourceVersion))
				fe.mu.Unlock()
			}
		}
	}
	factory := informers.NewSharedInformerFactory(fe.cs, 0)
	inf := factory.Core().V1().Nodes().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: check, UpdateFunc: func(_, o any) { check(o) }}); err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	cache.WaitForCacheSync(ctx.Done(), inf.HasSynced)
}

// waitNodes waits until every node of the fleet is in its expected end state: the good GPU
// nodes StackReady with every gate open and their device plugin advertising GPUs, the
// drifted ones DriverDrift and the toolkit failure ToolkitInstallFailed.
func (fe *fleetEnv) waitNodes(t *testing.T, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, "every node in its end state", func() (bool, string) {
		var bad []string
		for _, n := range fe.nodes {
			if n.cpu {
				continue
			}
			node, err := fe.cs.CoreV1().Nodes().Get(context.Background(), n.name, metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			if got, want := fleetState(node), expectedState(n); got != want {
				bad = append(bad, fmt.Sprintf("%s: %s (want %s)", n.name, got, want))
			}
		}
		sort.Strings(bad)
		return len(bad) == 0, strings.Join(bad, "; ")
	})
}

func expectedState(n fleetNode) string {
	switch {
	case n.drifted:
		return "False/" + config.ReasonDriverDrift
	case n.toolkitKO:
		return "False/" + config.ReasonToolkitInstallFailed
	}
	return "True/" + config.ReasonStackReady + " gates open, GPUs advertised"
}

func fleetState(node *corev1.Node) string {
	s := "no condition"
	for _, c := range node.Status.Conditions {
		if c.Type == config.ConditionGPUStackReady {
			s = string(c.Status) + "/" + c.Reason
		}
	}
	if s != "True/"+config.ReasonStackReady {
		return s
	}
	for _, g := range []string{config.LabelDeployDriver, config.LabelDeployToolkit, config.LabelToolkitReady, config.LabelDeployDevicePlugin,
		config.LabelDeployFeatureDiscovery, config.LabelDeployExporter} {
		if node.Labels[g] != "true" {
			return s + " but " + g + "=" + node.Labels[g]
		}
	}
	// nvidia.com/gpu, or the renamed resource of a time-sliced policy (nvidia.com/gpu.shared).
	for name, q := range node.Status.Allocatable {
		if (name == "nvidia.com/gpu" || strings.HasPrefix(string(name), "nvidia.com/gpu.")) && q.Value() > 0 {
			return s + " gates open, GPUs advertised"
		}
	}
	return s + " gates open, no GPUs advertised"
}
