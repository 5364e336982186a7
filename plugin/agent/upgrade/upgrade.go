// Package upgrade is the node agent's part of a rolling driver upgrade, for its own node
// only; there is no central controller. A pool's concurrency is a set of Leases (slots.go):
// an agent whose driver pod runs an older revision than its OnDelete driver DaemonSet takes a
// slot, then moves its node through GPU Operator's states (label
// nvidia.com/gpu-driver-upgrade-state): cordon → wait for the selected jobs → evict the GPU
// pods and the drain selector's pods through the Eviction API → delete its driver pod so the
// DaemonSet starts the new one → validate → uncordon → release the slot. Every step is
// derived from the node's label and annotations, so a restarted agent resumes where the last
// one stopped. For a preinstalled driver it only keeps the drift taint under onDrift: taint.
package upgrade

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpupolicy/gpupolicy/plugin/agent/nodeapi"
	"github.com/gpupolicy/gpupolicy/plugin/agent/wake"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// DefaultValidationTimeout bounds validation-required: the driver container's startup probe
// allows 30 minutes to build the modules for a new kernel, so a little more than that.
const DefaultValidationTimeout = 35 * time.Minute

// Component names the step in Events and logs.
const Component = "gpu-driver-upgrade"

// Upgrader runs the upgrade step of one node.
type Upgrader struct {
	Client    kubernetes.Interface
	Node      string
	Namespace string // the policy's: the driver DaemonSets and the slot Leases live there
	Config    *config.Agent
	Logger    *slog.Logger
	// LeaseDuration of a slot; 0 is config.DefaultUpgradeLeaseDuration.
	LeaseDuration time.Duration
	// ValidationTimeout; 0 is DefaultValidationTimeout.
	ValidationTimeout time.Duration
	// Reload, when set, reads the agent config again before every pass: a policy change
	// (the pool's new driver version) reaches the pod as an updated ConfigMap file while the
	// upgrade it starts is already running.
	Reload func() (*config.Agent, error)

	now func() time.Time
}

// Outcome is one pass's verdict.
type Outcome struct {
	State   string // config.UpgradeState*; "" when the node takes no part
	Message string
	Slot    string // the Lease held, if any
}

func (u *Upgrader) clock() time.Time {
	if u.now != nil {
		return u.now()
	}
	return time.Now()
}

func (u *Upgrader) log() *slog.Logger {
	l := u.Logger
	if l == nil {
		l = slog.Default()
	}
	return l.With("node", u.Node, "stage", Component)
}

// Reconcile runs one pass and reports the state on the node.
func (u *Upgrader) Reconcile(ctx context.Context) (Outcome, error) {
	if u.Reload != nil {
		cfg, err := u.Reload()
		if err != nil {
			return Outcome{}, err
		}
		u.Config = cfg
	}
	node, err := u.Client.CoreV1().Nodes().Get(ctx, u.Node, metav1.GetOptions{})
	if err != nil {
		return Outcome{}, fmt.Errorf("get node %s: %w", u.Node, err)
	}
	want, pool := u.Config.DriverFor(node.Labels)
	if want.Source != config.DriverSourceContainer {
		return Outcome{}, u.driftTaint(ctx, node, want)
	}
	if u.Config.Upgrade == nil {
		return Outcome{}, errors.New("agent config has no upgrade settings for a container driver: re-render with gpupolicy-fn")
	}
	slots := &Slots{Client: u.Client, Namespace: u.Namespace, Pool: pool, Holder: u.Node, Duration: u.leaseDuration(), Now: u.clock}
	st, err := readStage(ctx, u.Client, u.Namespace, config.DriverDaemonSet(pool), u.Node)
	if errors.Is(err, errNoDaemonSet) {
		// The agent runs from the first stage on; the driver stage comes next.
		u.log().Debug("driver DaemonSet not applied yet", "daemonset", config.DriverDaemonSet(pool))
		return Outcome{}, nil
	}
	if err != nil {
		return Outcome{}, err
	}
	out, err := u.step(ctx, node, st, slots)
	if err != nil {
		return out, err
	}
	return out, u.report(ctx, node, out, st)
}

func (u *Upgrader) leaseDuration() time.Duration {
	if u.LeaseDuration > 0 {
		return u.LeaseDuration
	}
	return config.DefaultUpgradeLeaseDuration
}

// since is when the node entered its current state, by its annotation, else now.
func (u *Upgrader) since(node *corev1.Node) time.Time {
	if t, err := time.Parse(time.RFC3339, node.Annotations[config.AnnotationDriverUpgradeSince]); err == nil {
		return t
	}
	return u.clock()
}

// step decides the node's next state from its current one and does that state's work.
// Each case either moves on (returning the next state, acted on in the next pass) or stays
// with a message saying what it waits for.
func (u *Upgrader) step(ctx context.Context, node *corev1.Node, st *driverStage, slots *Slots) (Outcome, error) {
	state := node.Labels[config.LabelDriverUpgradeState]
	target := node.Annotations[config.AnnotationDriverUpgradeTarget]
	cfg := u.Config.Upgrade
	drainTimeout, jobsTimeout, err := cfg.Timeouts()
	if err != nil {
		return Outcome{}, err
	}
	drainSel, jobsSel, err := cfg.Selectors()
	if err != nil {
		return Outcome{}, err
	}
	at := func(s, format string, args ...any) Outcome {
		return Outcome{State: s, Message: fmt.Sprintf(format, args...)}
	}
	waited := u.clock().Sub(u.since(node))

	switch state {
	case "", config.UpgradeStateDone:
		if !st.outdated() {
			if st.pod == nil {
				return Outcome{State: state, Message: node.Annotations[config.AnnotationDriverUpgradeMessage]}, nil
			}
			return at(config.UpgradeStateDone, "driver pod %s runs the current revision %s of DaemonSet %s", st.pod.Name, st.current, st.ds.Name), nil
		}
		return at(config.UpgradeStateRequired, "driver pod %s runs revision %s; DaemonSet %s is at %s", st.pod.Name, hash(st.pod), st.ds.Name, st.current), nil

	case config.UpgradeStateRequired:
		if !st.outdated() {
			return at(config.UpgradeStateDone, "driver pod runs the current revision %s", st.current), slots.Release(ctx)
		}
		n, err := cfg.Slots(int(st.ds.Status.DesiredNumberScheduled))
		if err != nil {
			return Outcome{}, err
		}
		slot, holders, err := slots.Acquire(ctx, n)
		if err != nil {
			return Outcome{}, err
		}
		if slot == "" {
			return at(state, "waiting for an upgrade slot: all %d (maxUnavailable %s of %d nodes) are held by %s", n, cfg.MaxUnavailable, st.ds.Status.DesiredNumberScheduled, strings.Join(holders, ", ")), nil
		}
		return Outcome{State: config.UpgradeStateCordonRequired, Slot: slot, Message: fmt.Sprintf("took upgrade slot %s for revision %s", slot, st.current)}, nil
	}

	// Every later state runs only while the node holds its slot: a slot it lost (it expired
	// while the agent was away and another node took it) is taken again, or waited for.
	if state != config.UpgradeStateFailed {
		slot, err := u.holdSlot(ctx, slots, st)
		if err != nil {
			return Outcome{}, err
		}
		if slot == "" {
			return at(state, "lost its upgrade slot while away; waiting for a free one to go on"), nil
		}
	}

	switch state {
	case config.UpgradeStateCordonRequired:
		if _, err := patchSpec(ctx, u.Client, u.Node, specChange{unschedulable: ptr(true)}); err != nil {
			return Outcome{}, err
		}
		return at(config.UpgradeStateWaitForJobs, "cordoned"), nil

	case config.UpgradeStateWaitForJobs:
		pods, err := podsOn(ctx, u.Client, u.Node)
		if err != nil {
			return Outcome{}, err
		}
		jobs := selectPods(pods, matching(jobsSel))
		if len(jobs) > 0 && (jobsTimeout == 0 || waited < jobsTimeout) {
			return at(state, "waiting for %d job pod(s) selected by %q to finish: %s", len(jobs), cfg.WaitForJobsPodSelector, podNames(jobs)), nil
		}
		if !cfg.Drain {
			return at(config.UpgradeStatePodRestart, "drain disabled: the driver pod is replaced with pods still running"), nil
		}
		return at(config.UpgradeStatePodDeletion, "no job pods to wait for"), nil

	case config.UpgradeStatePodDeletion, config.UpgradeStateDrainRequired:
		pods, err := podsOn(ctx, u.Client, u.Node)
		if err != nil {
			return Outcome{}, err
		}
		keep, what, next := usesGPU, "GPU pod", config.UpgradeStateDrainRequired
		if state == config.UpgradeStateDrainRequired {
			keep, what, next = matching(drainSel), fmt.Sprintf("pod selected by %q", cfg.DrainPodSelector), config.UpgradeStatePodRestart
		}
		left := selectPods(pods, keep)
		if len(left) == 0 {
			return at(next, "no %s left on the node", what), nil
		}
		if drainTimeout > 0 && waited > drainTimeout {
			return at(config.UpgradeStateFailed, "drain timed out after %s with %d %s(s) left: %s; the node stays cordoned: move or delete them, then set label %s=%s to retry",
				waited.Round(time.Second), len(left), what, podNames(left), config.LabelDriverUpgradeState, config.UpgradeStateRequired), nil
		}
		var blocked []string
		for i := range left {
			if left[i].DeletionTimestamp != nil {
				continue // evicted, terminating
			}
			var b *BlockedError
			switch err := evict(ctx, u.Client, &left[i]); {
			case errors.As(err, &b):
				blocked = append(blocked, b.Error())
			case err != nil:
				return Outcome{}, err
			}
		}
		if len(blocked) > 0 {
			return Outcome{State: state, Message: strings.Join(blocked, "; ") + " (retrying)"}, nil
		}
		return at(state, "evicting %d %s(s): %s", len(left), what, podNames(left)), nil

	case config.UpgradeStatePodRestart:
		if st.pod != nil && hash(st.pod) == st.current {
			return at(config.UpgradeStateValidation, "driver pod %s of revision %s started", st.pod.Name, st.current), nil
		}
		if st.pod != nil && st.pod.DeletionTimestamp == nil {
			err := u.Client.CoreV1().Pods(st.pod.Namespace).Delete(ctx, st.pod.Name, metav1.DeleteOptions{
				Preconditions: &metav1.Preconditions{UID: &st.pod.UID}})
			if err != nil && !apierrors.IsNotFound(err) {
				return Outcome{}, fmt.Errorf("delete driver pod %s/%s: %w", st.pod.Namespace, st.pod.Name, err)
			}
			return at(state, "deleted driver pod %s (revision %s); DaemonSet %s starts revision %s", st.pod.Name, hash(st.pod), st.ds.Name, st.current), nil
		}
		return at(state, "waiting for DaemonSet %s to start its revision %s pod on the node", st.ds.Name, st.current), nil

	case config.UpgradeStateValidation:
		if st.outdated() || st.pod == nil {
			return at(config.UpgradeStatePodRestart, "the driver pod is gone or outdated again"), nil
		}
		ok, why := u.validate(node, st)
		if ok {
			return at(config.UpgradeStateUncordonRequired, "validated: %s", why), nil
		}
		if waited > u.validationTimeout() {
			return at(config.UpgradeStateFailed, "validation failed after %s: %s; the node stays cordoned", waited.Round(time.Second), why), nil
		}
		return at(state, "validating: %s", why), nil

	case config.UpgradeStateUncordonRequired:
		if node.Annotations[config.AnnotationDriverUpgradeCordoned] == "true" {
			if _, err := patchSpec(ctx, u.Client, u.Node, specChange{unschedulable: ptr(false)}); err != nil {
				return Outcome{}, err
			}
		}
		if err := slots.Release(ctx); err != nil {
			return Outcome{}, err
		}
		return at(config.UpgradeStateDone, "driver revision %s validated; node uncordoned, slot released", st.current), nil

	case config.UpgradeStateFailed:
		// The slot stays held, so a bad driver stops the pool after maxUnavailable nodes
		// instead of running through all of them. A node that validates after all, or a
		// newer revision (the fix), goes on; so does a person's reset of the label.
		if _, err := slots.Held(ctx); err != nil {
			return Outcome{}, err
		}
		if target != "" && st.current != target {
			return at(config.UpgradeStatePodRestart, "DaemonSet %s moved to revision %s: retrying", st.ds.Name, st.current), nil
		}
		if ok, why := u.validate(node, st); ok && !st.outdated() {
			return at(config.UpgradeStateUncordonRequired, "validated after all: %s", why), nil
		}
		return Outcome{State: state, Message: node.Annotations[config.AnnotationDriverUpgradeMessage]}, nil
	}
	return at(config.UpgradeStateFailed, "unknown state %q on label %s: set it to %s to start over", state, config.LabelDriverUpgradeState, config.UpgradeStateRequired), nil
}

// holdSlot renews this node's slot or takes a free one again.
func (u *Upgrader) holdSlot(ctx context.Context, slots *Slots, st *driverStage) (string, error) {
	if slot, err := slots.Held(ctx); err != nil || slot != "" {
		return slot, err
	}
	n, err := u.Config.Upgrade.Slots(int(st.ds.Status.DesiredNumberScheduled))
	if err != nil {
		return "", err
	}
	slot, _, err := slots.Acquire(ctx, n)
	return slot, err
}

func (u *Upgrader) validationTimeout() time.Duration {
	if u.ValidationTimeout > 0 {
		return u.ValidationTimeout
	}
	return DefaultValidationTimeout
}

// validate is the driver stage's own check: the new driver pod is Ready (its probe runs
// nvidia-smi against the loaded modules) and the gate read the pool's version from the node's
// kernel module (label nvidia.com/gpu.driver.version).
func (u *Upgrader) validate(node *corev1.Node, st *driverStage) (bool, string) {
	want, _ := u.Config.DriverFor(node.Labels)
	if !ready(st.pod) {
		return false, fmt.Sprintf("driver pod %s is not Ready yet", st.pod.Name)
	}
	found := node.Labels[config.LabelDriverVersion]
	if found != want.Version {
		if found == "" {
			found = "none"
		}
		return false, fmt.Sprintf("the node's kernel module reports driver %s (label %s), want %s", found, config.LabelDriverVersion, want.Version)
	}
	return true, fmt.Sprintf("driver pod %s Ready, kernel module %s", st.pod.Name, found)
}

// report writes the state label, message, target and since annotations, and posts an Event
// when the state changed (or, in a waiting state, when what it waits for changed).
func (u *Upgrader) report(ctx context.Context, node *corev1.Node, out Outcome, st *driverStage) error {
	old := node.Labels[config.LabelDriverUpgradeState]
	if out.State == "" {
		return nil
	}
	annotations := map[string]string{config.AnnotationDriverUpgradeMessage: out.Message}
	if out.State != old {
		annotations[config.AnnotationDriverUpgradeSince] = u.clock().UTC().Format(time.RFC3339)
	}
	switch out.State {
	case config.UpgradeStateRequired:
		annotations[config.AnnotationDriverUpgradeTarget] = st.current
	case config.UpgradeStateDone:
		annotations[config.AnnotationDriverUpgradeTarget] = ""
	}
	if out.State == config.UpgradeStateRequired && old == "" {
		// Entering from nothing: no stale since from an earlier upgrade.
		annotations[config.AnnotationDriverUpgradeSince] = u.clock().UTC().Format(time.RFC3339)
	}
	changed := old != out.State || node.Annotations[config.AnnotationDriverUpgradeMessage] != out.Message
	after, err := nodeapi.Converge(ctx, u.Client, u.Node, func(n *corev1.Node) []nodeapi.Change {
		if c := nodeapi.Diff(n, map[string]string{config.LabelDriverUpgradeState: out.State}, annotations); !c.Empty() {
			return []nodeapi.Change{c}
		}
		return nil
	})
	if err != nil {
		return err
	}
	// A node found up to date (first pass, or nothing to do) is labelled without an Event.
	if !changed || out.State == config.UpgradeStateDone && old != config.UpgradeStateUncordonRequired {
		return nil
	}
	typ, reason := corev1.EventTypeNormal, config.ReasonDriverUpgrade
	switch {
	case out.State == config.UpgradeStateFailed:
		typ, reason = corev1.EventTypeWarning, config.ReasonDriverUpgradeFailed
	case out.State == config.UpgradeStateDone:
		reason = config.ReasonDriverUpgradeDone
	case strings.Contains(out.Message, "blocked by PodDisruptionBudget") || strings.Contains(out.Message, "eviction of pod"):
		typ, reason = corev1.EventTypeWarning, config.ReasonEvictionBlocked
	}
	u.log().Info("driver upgrade", "state", out.State, "from", old, "message", out.Message)
	if err := nodeapi.Event(ctx, u.Client, after, Component, typ, reason, out.State+": "+out.Message); err != nil {
		u.log().Warn("could not post event", "error", err)
	}
	return nil
}

// driftTaint keeps nvidia.com/gpu.driver-drift:NoSchedule on a node whose preinstalled driver
// the gate labelled drifted, under onDrift: taint, and removes it otherwise.
func (u *Upgrader) driftTaint(ctx context.Context, node *corev1.Node, want config.AgentDriver) error {
	drifted := want.OnDrift == config.OnDriftTaint && node.Labels[config.LabelDriverDrift] == "true"
	_, err := patchSpec(ctx, u.Client, u.Node, specChange{taint: &drifted})
	return err
}

// Run reconciles now, whenever the Node, a pod on it, a driver DaemonSet or a slot changes,
// and every interval, until ctx ends.
func (u *Upgrader) Run(ctx context.Context, interval time.Duration) error {
	// A held slot must be renewed well within its lease, whatever else wakes the step.
	interval = min(interval, u.leaseDuration()/3)
	t := wake.New()
	go t.Node(ctx, u.log(), u.Client, u.Node, interval)
	u.watches(ctx, t, interval)
	for {
		if out, err := u.Reconcile(ctx); err != nil {
			u.log().Warn("driver upgrade pass failed; retrying", "error", err)
		} else if out.State != "" && out.State != config.UpgradeStateDone {
			u.log().Debug("driver upgrade", "state", out.State, "message", out.Message)
		}
		if err := t.Wait(ctx, interval); err != nil {
			return err
		}
		t.Take()
	}
}
