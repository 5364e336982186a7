package upgrade

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gpupolicy/gpupolicy/plugin/config"
)

const ns = "gpu-system"

// cluster is a fake API server with a driver DaemonSet of revision "new" whose pods on every
// node still run "old", plus what the real control plane does that the fake does not: the
// Eviction API (protected pods are refused with a PodDisruptionBudget cause, others deleted),
// the DaemonSet controller (a deleted driver pod comes back at the current revision) and the
// gate (a new driver pod, once Ready, reports its version on the node).
type cluster struct {
	t         *testing.T
	cs        *fake.Clientset
	ds        *appsv1.DaemonSet
	protected map[string]string // pod name → PDB that refuses its eviction
	version   map[string]string // revision → driver version it brings
	clock     time.Time
}

func newCluster(t *testing.T, nodes ...string) *cluster {
	c := &cluster{t: t, cs: fake.NewClientset(), protected: map[string]string{},
		version: map[string]string{"old": "570.195.03", "new": "580.95.05"},
		clock:   time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)}
	ctx := context.Background()
	c.ds = &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu-driver-training", Namespace: ns, UID: "ds-uid"},
		Spec:       appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": "gpu-driver-training"}}},
		Status:     appsv1.DaemonSetStatus{DesiredNumberScheduled: int32(len(nodes))},
	}
	must(t, create(ctx, c.cs, c.ds))
	for i, h := range []string{"old", "new"} {
		must(t, create(ctx, c.cs, &appsv1.ControllerRevision{
			ObjectMeta: metav1.ObjectMeta{Name: "gpu-driver-training-" + h, Namespace: ns,
				Labels:          map[string]string{"app.kubernetes.io/name": "gpu-driver-training", appsv1.DefaultDaemonSetUniqueLabelKey: h},
				OwnerReferences: []metav1.OwnerReference{owner(c.ds)}},
			Revision: int64(i + 1),
		}))
	}
	for _, n := range nodes {
		must(t, create(ctx, c.cs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n,
			Labels: map[string]string{"gpupolicy.dev/pool": "training", config.LabelDriverVersion: "570.195.03"}}}))
		c.driverPod(n, "old")
	}
	c.cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		ev := a.(k8stesting.CreateAction).GetObject().(*policyv1.Eviction)
		if pdb, ok := c.protected[ev.Name]; ok {
			err := apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
			err.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: policyv1.DisruptionBudgetCause,
				Message: fmt.Sprintf("The disruption budget %s needs 1 healthy pods and has 1 currently", pdb)}}
			return true, nil, err
		}
		return true, nil, c.cs.Tracker().Delete(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, ev.Namespace, ev.Name)
	})
	return c
}

func owner(ds *appsv1.DaemonSet) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: ds.UID, Controller: ptr(true)}
}

func create(ctx context.Context, cs *fake.Clientset, obj runtime.Object) error {
	switch o := obj.(type) {
	case *appsv1.DaemonSet:
		_, err := cs.AppsV1().DaemonSets(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		return err
	case *appsv1.ControllerRevision:
		_, err := cs.AppsV1().ControllerRevisions(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		return err
	case *corev1.Node:
		_, err := cs.CoreV1().Nodes().Create(ctx, o, metav1.CreateOptions{})
		return err
	case *corev1.Pod:
		_, err := cs.CoreV1().Pods(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		return err
	}
	return fmt.Errorf("unhandled %T", obj)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func (c *cluster) driverPod(node, rev string) {
	must(c.t, create(context.Background(), c.cs, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu-driver-training-" + node + "-" + rev, Namespace: ns, UID: types.UID(node + rev),
			Labels:          map[string]string{"app.kubernetes.io/name": "gpu-driver-training", appsv1.DefaultDaemonSetUniqueLabelKey: rev},
			OwnerReferences: []metav1.OwnerReference{owner(c.ds)}},
		Spec:   corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}))
}

func (c *cluster) gpuPod(name, node string, labels map[string]string) {
	must(c.t, create(context.Background(), c.cs, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ml", UID: types.UID(name), Labels: labels},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "train", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}))
}

// controllers plays the DaemonSet controller and the gate for one node: a missing driver pod
// is recreated at the newest revision, and the node's driver label follows its pod's version.
func (c *cluster) controllers(node string) {
	ctx := context.Background()
	st, err := readStage(ctx, c.cs, ns, c.ds.Name, node)
	must(c.t, err)
	if st.pod == nil {
		c.driverPod(node, st.current)
		st.pod = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{appsv1.DefaultDaemonSetUniqueLabelKey: st.current}}}
	}
	n, err := c.cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	must(c.t, err)
	if v := c.version[hash(st.pod)]; n.Labels[config.LabelDriverVersion] != v {
		n.Labels[config.LabelDriverVersion] = v
		_, err = c.cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		must(c.t, err)
	}
}

func (c *cluster) agent(node string) *Upgrader {
	return &Upgrader{Client: c.cs, Node: node, Namespace: ns, now: func() time.Time { return c.clock }, Logger: slog.New(slog.DiscardHandler),
		Config: &config.Agent{
			Driver: config.AgentDriver{Source: "preinstalled", Version: "580.95.05"},
			NodePools: []config.AgentPool{{Name: "training", NodeSelector: map[string]string{"gpupolicy.dev/pool": "training"},
				Driver: &config.AgentDriver{Source: "container", Version: "580.95.05", Enforce: "exact"}}},
			Upgrade: &config.AgentUpgrade{MaxUnavailable: "2", Drain: true, DrainTimeout: "10m", WaitForJobsTimeout: "0s",
				WaitForJobsPodSelector: "kind=job"},
		}}
}

func (c *cluster) node(name string) *corev1.Node {
	n, err := c.cs.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
	must(c.t, err)
	return n
}

func (c *cluster) pass(node string) Outcome {
	c.t.Helper()
	out, err := c.agent(node).Reconcile(context.Background())
	must(c.t, err)
	c.controllers(node)
	return out
}

// run passes until the node reaches state or passes run out, returning the states seen.
func (c *cluster) run(node, state string, passes int) []string {
	c.t.Helper()
	var seen []string
	for range passes {
		out := c.pass(node)
		if len(seen) == 0 || seen[len(seen)-1] != out.State {
			seen = append(seen, out.State)
		}
		if out.State == state {
			return seen
		}
	}
	c.t.Fatalf("node %s never reached %s; states %v; message %q", node, state, seen, c.node(node).Annotations[config.AnnotationDriverUpgradeMessage])
	return nil
}

func (c *cluster) leases() []coordinationv1.Lease {
	l, err := c.cs.CoordinationV1().Leases(ns).List(context.Background(), metav1.ListOptions{})
	must(c.t, err)
	return l.Items
}

func (c *cluster) podExists(ns, name string) bool {
	_, err := c.cs.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	return err == nil
}

// TestUpgradeWalksGPUOperatorStates: an outdated driver pod takes the node through every
// state in order, evicts only its own node's GPU pods, waits for the job pod, replaces the
// driver pod, and ends uncordoned with the slot released.
func TestUpgradeWalksGPUOperatorStates(t *testing.T) {
	c := newCluster(t, "gpu-1", "gpu-2")
	c.gpuPod("train-1", "gpu-1", nil)
	c.gpuPod("train-other", "gpu-2", nil)
	c.gpuPod("job-1", "gpu-1", map[string]string{"kind": "job"})

	c.run("gpu-1", config.UpgradeStateWaitForJobs, 5)
	if !c.node("gpu-1").Spec.Unschedulable {
		t.Fatal("node not cordoned before waiting for jobs")
	}
	for range 3 {
		if out := c.pass("gpu-1"); out.State != config.UpgradeStateWaitForJobs || !strings.Contains(out.Message, "ml/job-1") {
			t.Fatalf("must wait for the job pod, got %+v", out)
		}
	}
	job, _ := c.cs.CoreV1().Pods("ml").Get(context.Background(), "job-1", metav1.GetOptions{})
	job.Status.Phase = corev1.PodSucceeded
	_, err := c.cs.CoreV1().Pods("ml").UpdateStatus(context.Background(), job, metav1.UpdateOptions{})
	must(t, err)

	seen := c.run("gpu-1", config.UpgradeStateDone, 20)
	want := []string{config.UpgradeStatePodDeletion, config.UpgradeStateDrainRequired, config.UpgradeStatePodRestart,
		config.UpgradeStateValidation, config.UpgradeStateUncordonRequired, config.UpgradeStateDone}
	if strings.Join(seen, ",") != strings.Join(want, ",") {
		t.Fatalf("states %v, want %v", seen, want)
	}
	n := c.node("gpu-1")
	if n.Spec.Unschedulable || n.Annotations[config.AnnotationDriverUpgradeCordoned] != "" {
		t.Fatalf("node not uncordoned: unschedulable=%v annotations=%v", n.Spec.Unschedulable, n.Annotations)
	}
	if c.podExists("ml", "train-1") {
		t.Fatal("the GPU pod on the node was not evicted")
	}
	if !c.podExists("ml", "train-other") {
		t.Fatal("a GPU pod on another node was evicted")
	}
	if !c.podExists(ns, "gpu-driver-training-gpu-2-old") {
		t.Fatal("another node's driver pod was deleted")
	}
	if l := c.leases(); len(l) != 0 {
		t.Fatalf("slot not released: %v", l)
	}
}

// TestUpgradeSlotsBoundThePool: with maxUnavailable 2 only two of three nodes leave
// upgrade-required; the third names the holders and goes once one finishes; a slot whose
// holder stopped renewing is free after the lease duration.
func TestUpgradeSlotsBoundThePool(t *testing.T) {
	c := newCluster(t, "gpu-1", "gpu-2", "gpu-3")
	for _, n := range []string{"gpu-1", "gpu-2"} {
		c.run(n, config.UpgradeStateWaitForJobs, 5)
	}
	c.pass("gpu-3")
	out := c.pass("gpu-3")
	if out.State != config.UpgradeStateRequired || !strings.Contains(out.Message, "held by gpu-1, gpu-2") {
		t.Fatalf("third node must wait for a slot, got %+v", out)
	}
	cordoned := 0
	for _, n := range []string{"gpu-1", "gpu-2", "gpu-3"} {
		if c.node(n).Spec.Unschedulable {
			cordoned++
		}
	}
	if cordoned != 2 {
		t.Fatalf("%d nodes cordoned, want 2", cordoned)
	}
	// gpu-1's agent dies: its slot expires and gpu-3 takes it.
	c.clock = c.clock.Add(config.DefaultUpgradeLeaseDuration + time.Second)
	c.pass("gpu-2") // renews its own
	if out := c.pass("gpu-3"); out.State != config.UpgradeStateCordonRequired {
		t.Fatalf("gpu-3 must take the expired slot, got %+v", out)
	}
	// gpu-1's agent comes back: its slot is gone and all are held, so it waits, cordoned.
	if out := c.pass("gpu-1"); !strings.Contains(out.Message, "lost its upgrade slot") {
		t.Fatalf("gpu-1 must wait for a slot again, got %+v", out)
	}
}

// TestUpgradeEvictionBlockedByPDB: a protected pod keeps its node in pod-deletion-required
// with the PDB's name in the message and a Warning Event, retried on every pass, until the
// budget allows it.
func TestUpgradeEvictionBlockedByPDB(t *testing.T) {
	c := newCluster(t, "gpu-1")
	c.gpuPod("serve-1", "gpu-1", nil)
	c.protected["serve-1"] = "serve-pdb"
	c.run("gpu-1", config.UpgradeStatePodDeletion, 6)
	for range 3 {
		out := c.pass("gpu-1")
		if out.State != config.UpgradeStatePodDeletion || !strings.Contains(out.Message, "blocked by PodDisruptionBudget serve-pdb") {
			t.Fatalf("want blocked by serve-pdb, got %+v", out)
		}
	}
	evs, err := c.cs.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
	must(t, err)
	blocked := 0
	for _, e := range evs.Items {
		if e.Reason == config.ReasonEvictionBlocked && strings.Contains(e.Message, "serve-pdb") {
			blocked++
		}
	}
	if blocked != 1 {
		t.Fatalf("want one EvictionBlocked event naming the PDB (not one per retry), got %d", blocked)
	}
	delete(c.protected, "serve-1")
	c.run("gpu-1", config.UpgradeStateDone, 12)
}

// TestUpgradeResumesAfterRestart: a fresh agent (no memory) continues from the node's state.
func TestUpgradeResumesAfterRestart(t *testing.T) {
	c := newCluster(t, "gpu-1")
	c.run("gpu-1", config.UpgradeStateWaitForJobs, 5)
	c.clock = c.clock.Add(30 * time.Second) // within the lease: the slot is still its own
	if out := c.pass("gpu-1"); out.State != config.UpgradeStatePodDeletion {
		t.Fatalf("a restarted agent must go on from wait-for-jobs-required, got %+v", out)
	}
	if l := c.leases(); len(l) != 1 || *l[0].Spec.HolderIdentity != "gpu-1" {
		t.Fatalf("the slot must stay gpu-1's: %v", l)
	}
	c.run("gpu-1", config.UpgradeStateDone, 12)
}

// TestUpgradeFailedValidationKeepsNodeCordoned: a driver that never reports its version leaves
// the node cordoned in upgrade-failed with the reason, holding its slot so the pool stops.
func TestUpgradeFailedValidationKeepsNodeCordoned(t *testing.T) {
	c := newCluster(t, "gpu-1", "gpu-2")
	c.version["new"] = "570.195.03" // the new pod loads the wrong module
	c.run("gpu-1", config.UpgradeStateValidation, 10)
	c.clock = c.clock.Add(DefaultValidationTimeout + time.Minute)
	// Stay within the lease: renew from the other node's view is irrelevant, the step renews.
	out := c.pass("gpu-1")
	if out.State != config.UpgradeStateFailed || !strings.Contains(out.Message, "want 580.95.05") {
		t.Fatalf("want upgrade-failed with the reason, got %+v", out)
	}
	c.pass("gpu-1")
	n := c.node("gpu-1")
	if !n.Spec.Unschedulable || n.Labels[config.LabelDriverUpgradeState] != config.UpgradeStateFailed {
		t.Fatalf("a failed node must stay cordoned in upgrade-failed: %v %v", n.Spec.Unschedulable, n.Labels)
	}
	if l := c.leases(); len(l) != 1 || *l[0].Spec.HolderIdentity != "gpu-1" {
		t.Fatalf("the failed node keeps its slot: %v", l)
	}
}

// TestUpgradeLeavesAPersonsCordon: a node a person cordoned stays cordoned after the upgrade.
func TestUpgradeLeavesAPersonsCordon(t *testing.T) {
	c := newCluster(t, "gpu-1")
	n := c.node("gpu-1")
	n.Spec.Unschedulable = true
	_, err := c.cs.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{})
	must(t, err)
	c.run("gpu-1", config.UpgradeStateDone, 15)
	if !c.node("gpu-1").Spec.Unschedulable {
		t.Fatal("the upgrade uncordoned a node a person had cordoned")
	}
}

// TestDriftTaint: onDrift: taint puts the NoSchedule taint on a drifted preinstalled node,
// keeps other taints, and removes it once the driver matches.
func TestDriftTaint(t *testing.T) {
	c := newCluster(t)
	other := corev1.Taint{Key: "nvidia.com/gpu", Effect: corev1.TaintEffectNoSchedule}
	must(t, create(context.Background(), c.cs, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "pre-1",
		Labels: map[string]string{config.LabelDriverDrift: "true"}}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{other}}}))
	u := c.agent("pre-1")
	u.Config.Driver.OnDrift = config.OnDriftTaint
	_, err := u.Reconcile(context.Background())
	must(t, err)
	if ts := c.node("pre-1").Spec.Taints; len(ts) != 2 || ts[1].Key != config.TaintDriverDrift || ts[1].Effect != corev1.TaintEffectNoSchedule {
		t.Fatalf("drift taint missing or other taint lost: %v", ts)
	}
	n := c.node("pre-1")
	delete(n.Labels, config.LabelDriverDrift)
	_, err = c.cs.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{})
	must(t, err)
	_, err = u.Reconcile(context.Background())
	must(t, err)
	if ts := c.node("pre-1").Spec.Taints; len(ts) != 1 || ts[0] != other {
		t.Fatalf("drift taint not removed, or other taint lost: %v", ts)
	}
	u.Config.Driver.OnDrift = config.OnDriftReport
	n = c.node("pre-1")
	n.Labels = map[string]string{config.LabelDriverDrift: "true"}
	_, err = c.cs.CoreV1().Nodes().Update(context.Background(), n, metav1.UpdateOptions{})
	must(t, err)
	_, err = u.Reconcile(context.Background())
	must(t, err)
	if ts := c.node("pre-1").Spec.Taints; len(ts) != 1 {
		t.Fatalf("onDrift report must not taint: %v", ts)
	}
}

// A held slot is rewritten only once a third of its lease duration passed: every agent watches
// the slots, so a write on every pass would wake them all into passes of their own.
func TestSlotRenewalIsThrottled(t *testing.T) {
	c := newCluster(t, "gpu-1")
	s := &Slots{Client: c.cs, Namespace: ns, Pool: "training", Holder: "gpu-1", Duration: time.Minute, Now: func() time.Time { return c.clock }}
	ctx := context.Background()
	if slot, _, err := s.Acquire(ctx, 1); err != nil || slot == "" {
		t.Fatalf("acquire: %q %v", slot, err)
	}
	start := c.clock
	renewed := func() time.Time { return c.leases()[0].Spec.RenewTime.Time }
	c.clock = c.clock.Add(10 * time.Second)
	if _, err := s.Held(ctx); err != nil {
		t.Fatal(err)
	}
	if !renewed().Equal(start) {
		t.Fatalf("renewed 10 s after the last renewal (at %s)", renewed())
	}
	c.clock = c.clock.Add(15 * time.Second)
	if _, err := s.Held(ctx); err != nil {
		t.Fatal(err)
	}
	if !renewed().Equal(c.clock) {
		t.Fatalf("not renewed 25 s after (renew time %s)", renewed())
	}
}
