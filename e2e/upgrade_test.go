package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/gpupolicy/gpupolicy/e2e/internal/fakenode"
	"github.com/gpupolicy/gpupolicy/e2e/internal/gitops"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// upgradePolicy: two pools on different drivers, both run by NVIDIA's driver container; the
// training pool has its own (gpu-driver-training), the inference pool runs the default one.
const upgradePolicy = `apiVersion: gpupolicy.dev/v1alpha1
kind: GPUPolicy
metadata:
  name: fleet
spec:
  kubernetesVersion: "1.34"
  gitops: flux
  containerRuntime:
    version: "2.1"
  driver:
    source: container
    version: "580.95.05"
    upgrade:
      maxUnavailable: 2
  cuda:
    version: "12.8"
  nodePools:
  - name: inference
    nodeSelector:
      gpupolicy.dev/pool: inference
  - name: training
    nodeSelector:
      gpupolicy.dev/pool: training
    driver:
      version: "580.82.07"
`

const (
	trainingFrom = `version: "580.82.07"`
	trainingTo   = "580.105.08"
	blockingPDB  = "serve-pdb"
)

// upgradeWatch samples the training pool every 200 ms: the most nodes cordoned at once, and
// any inference node ever cordoned.
type upgradeWatch struct {
	mu            sync.Mutex
	maxCordoned   int
	cordonedNodes map[string]bool
	otherPool     []string
}

func (w *upgradeWatch) run(ctx context.Context, t *testing.T, fe *fleetEnv) {
	w.cordonedNodes = map[string]bool{}
	go func() {
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			nodes, err := fe.cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			if err != nil {
				continue
			}
			n := 0
			w.mu.Lock()
			for _, node := range nodes.Items {
				if !node.Spec.Unschedulable {
					continue
				}
				switch node.Labels["gpupolicy.dev/pool"] {
				case "training":
					n++
					w.cordonedNodes[node.Name] = true
				default:
					w.otherPool = append(w.otherPool, node.Name)
				}
			}
			w.maxCordoned = max(w.maxCordoned, n)
			w.mu.Unlock()
		}
	}()
}

// TestDriverUpgradeFlux: a one-line bump of the training pool's driver in git, applied by the
// real kustomize-controller, rolls through the pool with nothing done by hand: the agents take
// at most two slots (maxUnavailable: 2; sampled every 200 ms, never more than two training
// nodes cordoned), a pod behind a PodDisruptionBudget holds exactly its node (reported with
// the budget's name), the others finish, one agent killed mid-upgrade resumes, the inference
// pool is untouched, and the driver stage is Ready under Flux's rendered health rules.
func TestDriverUpgradeFlux(t *testing.T) {
	bins := gitopsBinaries(t)
	ctx := context.Background()
	start := time.Now()
	fe := newFleetEnvWith(t, "upgrade-flux", fleetNodes("up", 5, nil, nil), fakenode.ProbeReadiness, []byte(upgradePolicy), 20*time.Second)
	t.Logf("control plane and %d nodes up in %s", len(fe.nodes), time.Since(start).Round(time.Second))
	arts := startFlux(t, ctx, bins, fe)
	tree := fe.render(t, upgradePolicy, "GitRepository/fleet")
	art := publish(t, fe, arts, tree)
	applyKustomizations(t, fe, tree)
	if _, err := gitops.WaitReady(ctx, fe.cfg, fleetStages, art.Revision, 5*time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	fe.waitNodes(t, 3*time.Minute)
	training, inference := fe.poolNodes("training"), fe.poolNodes("inference")
	fe.waitDrivers(t, training, "580.82.07", 2*time.Minute)
	fe.waitDrivers(t, inference, "580.95.05", 2*time.Minute)
	inferencePods := fe.driverPods(t, "gpu-driver")

	// GPU jobs on every training node; the one on the second is protected by a budget that
	// allows no disruption.
	held := training[1]
	fe.gpuWorkloads(t, training, held)

	var w upgradeWatch
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	w.run(wctx, t, fe)

	t.Log("bump the training pool's driver (one line in git)")
	bumped := strings.Replace(upgradePolicy, trainingFrom, `version: "`+trainingTo+`"`, 1)
	bumpTree := fe.render(t, bumped, "GitRepository/fleet")
	if err := fe.fleet.SetAgentConfig(agentConfigOf(t, fe.objects(t, bumpTree))); err != nil {
		t.Fatal(err)
	}
	bumpArt := publish(t, fe, arts, bumpTree)
	bumpStart := time.Now()

	// Kill one agent's upgrade process while its node is mid-upgrade.
	var killed string
	eventually(t, 3*time.Minute, "a training node mid-upgrade", func() (bool, string) {
		for _, n := range training {
			s := fe.upgradeState(t, n)
			if n != held && s != config.UpgradeStateRequired && s != config.UpgradeStateDone && s != "" {
				killed = n
				return fe.fleet.RestartUpgrade(n) == nil, n + " " + s
			}
		}
		return false, fe.upgradeStates(t, training)
	})
	t.Logf("   killed the upgrade process of %s in state %s", killed, fe.upgradeState(t, killed))

	eventually(t, 6*time.Minute, "every training node but "+held+" upgraded, "+held+" held by "+blockingPDB, func() (bool, string) {
		for _, n := range training {
			node := fe.node(t, n)
			state := node.Labels[config.LabelDriverUpgradeState]
			if n == held {
				if state != config.UpgradeStatePodDeletion || !strings.Contains(node.Annotations[config.AnnotationDriverUpgradeMessage], "PodDisruptionBudget "+blockingPDB) {
					return false, fe.upgradeStates(t, training)
				}
				continue
			}
			if state != config.UpgradeStateDone || node.Labels[config.LabelDriverVersion] != trainingTo || node.Spec.Unschedulable {
				return false, fe.upgradeStates(t, training)
			}
		}
		return true, ""
	})
	t.Logf("   4 of 5 nodes upgraded %s after the bump; %s: %s", time.Since(bumpStart).Round(time.Second), held, fe.node(t, held).Annotations[config.AnnotationDriverUpgradeMessage])
	eventually(t, 30*time.Second, held+": a "+config.ReasonEvictionBlocked+" Event naming "+blockingPDB, func() (bool, string) {
		return fe.hasEvent(t, held, config.ReasonEvictionBlocked, blockingPDB), ""
	})
	// Flux's health rule for the driver stage: Ready at the bump, with one node still on the
	// old driver (its pod Ready), as kstatus alone would not allow.
	if _, err := gitops.WaitReady(ctx, fe.cfg, fleetStages, bumpArt.Revision, 3*time.Minute, nil); err != nil {
		t.Fatal(err)
	}

	t.Log("the budget goes away: the held node finishes")
	if err := fe.cs.PolicyV1().PodDisruptionBudgets("ml").Delete(ctx, blockingPDB, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	fe.waitDrivers(t, training, trainingTo, 3*time.Minute)
	fe.waitUpgradeDone(t, training, 2*time.Minute)
	t.Logf("   whole pool upgraded %s after the bump", time.Since(bumpStart).Round(time.Second))
	stop()

	w.mu.Lock()
	defer w.mu.Unlock()
	if w.maxCordoned > 2 || w.maxCordoned == 0 {
		t.Errorf("at most %d training nodes were cordoned at once, want 1 or 2 (maxUnavailable 2)", w.maxCordoned)
	}
	if len(w.cordonedNodes) != len(training) {
		t.Errorf("cordoned %d of %d training nodes", len(w.cordonedNodes), len(training))
	}
	t.Logf("   most training nodes cordoned at once: %d", w.maxCordoned)
	if len(w.otherPool) > 0 {
		t.Errorf("nodes outside the training pool were cordoned: %v", slices.Compact(w.otherPool))
	}
	if now := fe.driverPods(t, "gpu-driver"); !equalMaps(now, inferencePods) {
		t.Errorf("the inference pool's driver pods changed: %v → %v", inferencePods, now)
	}
	fe.waitDrivers(t, inference, "580.95.05", time.Second)
	if l, err := fe.cs.CoordinationV1().Leases(fe.ns).List(ctx, metav1.ListOptions{}); err != nil || len(l.Items) != 0 {
		t.Errorf("upgrade slots left behind: %v %v", l, err)
	}
	fe.waitNodes(t, 2*time.Minute)
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func (fe *fleetEnv) poolNodes(pool string) []string {
	var out []string
	for _, n := range fe.nodes {
		if n.pool == pool && !n.cpu {
			out = append(out, n.name)
		}
	}
	return out
}

func (fe *fleetEnv) node(t *testing.T, name string) *corev1.Node {
	t.Helper()
	n, err := fe.cs.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func (fe *fleetEnv) upgradeState(t *testing.T, name string) string {
	return fe.node(t, name).Labels[config.LabelDriverUpgradeState]
}

func (fe *fleetEnv) upgradeStates(t *testing.T, nodes []string) string {
	var out []string
	for _, n := range nodes {
		node := fe.node(t, n)
		out = append(out, fmt.Sprintf("%s=%s(%s, cordoned %v: %s)", n, node.Labels[config.LabelDriverUpgradeState],
			node.Labels[config.LabelDriverVersion], node.Spec.Unschedulable, node.Annotations[config.AnnotationDriverUpgradeMessage]))
	}
	return strings.Join(out, "; ")
}

// waitUpgradeDone waits until every one of nodes is upgrade-done and uncordoned.
func (fe *fleetEnv) waitUpgradeDone(t *testing.T, nodes []string, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, "every node of "+strings.Join(nodes, ", ")+" upgrade-done and uncordoned", func() (bool, string) {
		for _, n := range nodes {
			node := fe.node(t, n)
			if node.Labels[config.LabelDriverUpgradeState] != config.UpgradeStateDone || node.Spec.Unschedulable {
				return false, fe.upgradeStates(t, nodes)
			}
		}
		return true, ""
	})
}

// waitDrivers waits until every node's gate reports version as the loaded driver.
func (fe *fleetEnv) waitDrivers(t *testing.T, nodes []string, version string, timeout time.Duration) {
	t.Helper()
	eventually(t, timeout, "driver "+version+" on "+strings.Join(nodes, ", "), func() (bool, string) {
		for _, n := range nodes {
			if got := fe.node(t, n).Labels[config.LabelDriverVersion]; got != version {
				return false, n + " has " + got
			}
		}
		return true, ""
	})
}

// driverPods maps node → UID of DaemonSet ds's pod there.
func (fe *fleetEnv) driverPods(t *testing.T, ds string) map[string]string {
	t.Helper()
	pods, err := fe.cs.CoreV1().Pods(fe.ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=" + ds})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range pods.Items {
		out[p.Spec.NodeName] = string(p.UID)
	}
	return out
}

// gpuWorkloads runs a GPU pod on each node and on held a second one behind a
// PodDisruptionBudget that allows no disruption.
func (fe *fleetEnv) gpuWorkloads(t *testing.T, nodes []string, held string) {
	t.Helper()
	ctx := context.Background()
	fe.gpuPods(t, nodes, "train")
	fe.gpuPod(t, "serve-"+held, held, map[string]string{"app": "serve"})
	one := intstr.FromInt32(1)
	if _, err := fe.cs.PolicyV1().PodDisruptionBudgets("ml").Create(ctx, &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: blockingPDB},
		Spec:       policyv1.PodDisruptionBudgetSpec{MinAvailable: &one, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "serve"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	fe.waitGPUPods(t, len(nodes)+1)
}

// gpuPods runs a GPU pod <prefix>-<node> on each node, bound directly as a scheduled job is.
func (fe *fleetEnv) gpuPods(t *testing.T, nodes []string, prefix string) {
	t.Helper()
	if _, err := fe.cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ml"}}, metav1.CreateOptions{}); err != nil && !isAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, n := range nodes {
		fe.gpuPod(t, prefix+"-"+n, n, map[string]string{"app": prefix})
	}
}

func (fe *fleetEnv) gpuPod(t *testing.T, name, node string, labels map[string]string) {
	t.Helper()
	_, err := fe.cs.CoreV1().Pods("ml").Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "cuda", Image: "example.com/cuda-job:1",
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}}},
			Tolerations: []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// waitGPUPods waits until n pods of namespace ml run.
func (fe *fleetEnv) waitGPUPods(t *testing.T, n int) {
	t.Helper()
	eventually(t, time.Minute, "the GPU workloads running", func() (bool, string) {
		pods, err := fe.cs.CoreV1().Pods("ml").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var notRunning []string
		for _, p := range pods.Items {
			if p.Status.Phase != corev1.PodRunning {
				notRunning = append(notRunning, p.Name+" "+string(p.Status.Phase))
			}
		}
		sort.Strings(notRunning)
		return len(pods.Items) == n && len(notRunning) == 0, fmt.Sprintf("%d pods; not running: %s", len(pods.Items), strings.Join(notRunning, ", "))
	})
}

// TestDriverUpgradeBenchmark (E2E_UPGRADE_BENCH=1; skipped otherwise): the wall time of a
// driver bump through 10 kwok GPU nodes of one pool, each running a GPU pod, at maxUnavailable
// 1, 2 and 5, from the moment the DaemonSet has its new revision until every node is
// upgrade-done and uncordoned. Numbers go to BENCHMARKS.md; nothing here is asserted on time.
func TestDriverUpgradeBenchmark(t *testing.T) {
	if os.Getenv("E2E_UPGRADE_BENCH") == "" {
		t.Skip("set E2E_UPGRADE_BENCH=1 to measure upgrades of 10 nodes at maxUnavailable 1, 2 and 5")
	}
	bins := gitopsBinaries(t)
	ctx := context.Background()
	var nodes []fleetNode
	for i := range 10 {
		nodes = append(nodes, fleetNode{name: fmt.Sprintf("ub-tra-%02d", i+1), pool: "training"})
	}
	fe := newFleetEnvWith(t, "upgrade-bench", nodes, fakenode.ProbeReadiness, []byte(upgradePolicy), 20*time.Second)
	arts := startFlux(t, ctx, bins, fe)
	tree := fe.render(t, upgradePolicy, "GitRepository/fleet")
	art := publish(t, fe, arts, tree)
	applyKustomizations(t, fe, tree)
	if _, err := gitops.WaitReady(ctx, fe.cfg, fleetStages, art.Revision, 5*time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	fe.waitNodes(t, 3*time.Minute)
	training := fe.poolNodes("training")
	for i, round := range []struct {
		maxUnavailable int
		version        string
	}{{1, "580.105.08"}, {2, "580.65.06"}, {5, "580.76.05"}} {
		fe.gpuPods(t, training, fmt.Sprintf("job%d", i))
		fe.waitGPUPods(t, len(training))
		p := strings.Replace(upgradePolicy, trainingFrom, `version: "`+round.version+`"`, 1)
		p = strings.Replace(p, "maxUnavailable: 2", fmt.Sprintf("maxUnavailable: %d", round.maxUnavailable), 1)
		bumpTree := fe.render(t, p, "GitRepository/fleet")
		if err := fe.fleet.SetAgentConfig(agentConfigOf(t, fe.objects(t, bumpTree))); err != nil {
			t.Fatal(err)
		}
		published := time.Now()
		publish(t, fe, arts, bumpTree)
		var applied time.Time
		eventually(t, 2*time.Minute, "DaemonSet gpu-driver-training at the new image", func() (bool, string) {
			ds, err := fe.cs.AppsV1().DaemonSets(fe.ns).Get(ctx, "gpu-driver-training", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			img := ds.Spec.Template.Spec.Containers[0].Image
			ok := strings.Contains(img, ":"+round.version+"-") && ds.Status.ObservedGeneration == ds.Generation
			if ok {
				applied = time.Now()
			}
			return ok, img
		})
		fe.waitDrivers(t, training, round.version, 10*time.Minute)
		fe.waitUpgradeDone(t, training, 2*time.Minute)
		t.Logf("BENCH upgrade: %d nodes, maxUnavailable %d: %s from the new revision to every node done (%s after publishing)",
			len(training), round.maxUnavailable, time.Since(applied).Round(100*time.Millisecond), time.Since(published).Round(100*time.Millisecond))
	}
}

// hasEvent reports whether node has an Event of reason whose message contains text.
func (fe *fleetEnv) hasEvent(t *testing.T, node, reason, text string) bool {
	t.Helper()
	evs, err := fe.cs.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + node})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs.Items {
		if e.Reason == reason && strings.Contains(e.Message, text) {
			return true
		}
	}
	return false
}

// TestDriverUpgradeArgo: the same bump synced by Argo CD's own sync engine (gitops-engine's
// argo-sync): every wave, the driver's included, is healthy by gitops-engine's rules, and the
// agents then roll the pool one node at a time (maxUnavailable 1) while the other pool keeps
// its driver pods.
func TestDriverUpgradeArgo(t *testing.T) {
	bins := gitopsBinaries(t)
	ctx := context.Background()
	policy := strings.Replace(upgradePolicy, "\n  gitops: flux\n", "\n  gitops: argocd\n", 1)
	policy = strings.Replace(policy, "maxUnavailable: 2", "maxUnavailable: 1", 1)
	fe := newFleetEnvWith(t, "upgrade-argo", fleetNodes("ua", 3, nil, nil), fakenode.ProbeReadiness, []byte(policy), 20*time.Second)
	sync := func(step, policy string) { t.Helper(); fe.argoSync(t, ctx, bins, step, policy) }
	sync("install", policy)
	fe.waitNodes(t, 3*time.Minute)
	training, inference := fe.poolNodes("training"), fe.poolNodes("inference")
	fe.waitDrivers(t, training, "580.82.07", 2*time.Minute)
	inferencePods := fe.driverPods(t, "gpu-driver")
	fe.gpuPods(t, training, "train")
	fe.waitGPUPods(t, len(training))
	var w upgradeWatch
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	w.run(wctx, t, fe)

	bumped := strings.Replace(policy, trainingFrom, `version: "`+trainingTo+`"`, 1)
	if err := fe.fleet.SetAgentConfig(agentConfigOf(t, fe.objects(t, fe.render(t, bumped, "")))); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	sync("bump", bumped)
	fe.waitDrivers(t, training, trainingTo, 5*time.Minute)
	fe.waitUpgradeDone(t, training, 2*time.Minute)
	t.Logf("   pool upgraded %s after the sync began", time.Since(start).Round(time.Second))
	stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.maxCordoned != 1 || len(w.cordonedNodes) != len(training) || len(w.otherPool) > 0 {
		t.Errorf("cordons: at most %d at once (want 1), %d of %d training nodes, other pool %v", w.maxCordoned, len(w.cordonedNodes), len(training), w.otherPool)
	}
	if now := fe.driverPods(t, "gpu-driver"); !equalMaps(now, inferencePods) {
		t.Errorf("the inference pool's driver pods changed: %v → %v", inferencePods, now)
	}
	fe.waitDrivers(t, inference, "580.95.05", time.Second)
}
