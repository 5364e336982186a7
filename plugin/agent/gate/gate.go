// Package gate opens the per-node stage labels (nvidia.com/gpu.deploy.*) in order once each
// stage is verified on this node, and closes the labels downstream of a broken stage in
// reverse order. It is the only ordering mechanism on a node: the DaemonSets of later stages
// select on these labels. It keeps the node's GPUStackReady condition true to the same
// verdicts, so `kubectl describe node` says which stage holds the node back and why.
//
// The package is independent of what a stage check does: a StageCheck is a function, so the
// real checks (package stages) and injected ones (tests, e2e) run through the same reconcile.
package gate

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpupolicy/gpupolicy/plugin/agent/nodeapi"
	"github.com/gpupolicy/gpupolicy/plugin/agent/wake"
	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/nodefacts/hostfacts"
)

// Result is one stage check's verdict.
type Result struct {
	Ready  bool
	Reason string
	// Labels and Annotations the check owns (keys under nvidia.com/); "" removes the key.
	// They are applied whether or not the stage is ready (e.g. the driver version label).
	Labels      map[string]string
	Annotations map[string]string
	// ConditionReason is the CamelCase reason of the GPUStackReady condition while this stage
	// is the first not ready one ("DriverDrift"); "" derives it from the stage name.
	ConditionReason string
	// Pending: not ready only because gpupolicy's own stage has not run on this node yet (no
	// fault found). An adopted gate (config.AnnotationAdoptedGates) stays open past it.
	Pending bool
}

// Facts is what one pass knows about the node, read once before its checks run so every
// check, the labels it plans and the GPUStackReady condition judge the same state: the Node
// as the pass found it (its pool and MIG labels) and the host files (hostfacts.Facts).
type Facts struct {
	Node *corev1.Node
	Host hostfacts.Facts
}

// CheckFunc verifies one stage on this node from the pass's facts.
type CheckFunc func(f *Facts) Result

// Static returns a check with a fixed verdict.
func Static(ready bool, reason string) CheckFunc {
	return func(*Facts) Result { return Result{Ready: ready, Reason: reason} }
}

// StageCheck guards the labels in Opens: they are open iff this check and every check before
// it in Reconciler.Checks is ready. A nil Check is always ready (the entry stage).
type StageCheck struct {
	Stage string
	Opens []string
	Check CheckFunc
	// SkipCondition keeps the stage out of the GPUStackReady condition: the stage that holds
	// the disabled stages' gates shut is never ready, yet the node's stack may be complete.
	SkipCondition bool
}

// StageStatus is one stage's verdict as published in the gate-status annotation.
type StageStatus struct {
	Ready  bool   `json:"ready"`
	Reason string `json:"reason"`
}

// Status maps StageCheck.Stage to its verdict; it is the JSON of config.AnnotationGateStatus.
type Status map[string]StageStatus

// Reconciler converges one node's gate labels with its stage checks.
type Reconciler struct {
	Client kubernetes.Interface
	Node   string
	Checks []StageCheck
	Logger *slog.Logger
	// Wake, when set, makes Run reconcile at once on an event instead of at the next interval.
	Wake *wake.Trigger
	// ReadHost reads the host facts once per pass (hostfacts.Read under --host-root);
	// nil leaves Facts.Host empty (checks that read no host files).
	ReadHost func() hostfacts.Facts

	now func() time.Time // the condition's timestamps; nil is time.Now (tests inject a clock)
}

func (r *Reconciler) logger() *slog.Logger {
	l := r.Logger
	if l == nil {
		l = slog.Default()
	}
	return l.With("node", r.Node)
}

func (r *Reconciler) validate() error {
	if r.Client == nil {
		return errors.New("gate: Reconciler.Client is nil")
	}
	if r.Node == "" {
		return nodeapi.ErrNoNodeName
	}
	if len(r.Checks) == 0 {
		return errors.New("gate: Reconciler.Checks is empty")
	}
	seen := map[string]bool{}
	for _, c := range r.Checks {
		if c.Stage == "" || seen[c.Stage] {
			return fmt.Errorf("gate: stage name %q is empty or repeated", c.Stage)
		}
		seen[c.Stage] = true
		for _, l := range c.Opens {
			if !strings.HasPrefix(l, config.ManagedPrefix) {
				return fmt.Errorf("gate: stage %s opens %q, outside %s", c.Stage, l, config.ManagedPrefix)
			}
		}
	}
	return nil
}

// Reconcile reads the node's facts once (one GET of the Node, one read of each host file),
// runs every check on them and converges the node's labels and annotations with the verdicts.
// It returns the verdicts even when patching the node failed.
func (r *Reconciler) Reconcile(ctx context.Context) (Status, error) {
	if err := r.validate(); err != nil {
		return nil, err
	}
	log := r.logger()
	facts := &Facts{}
	var err error
	if facts.Node, err = nodeapi.Get(ctx, r.Client, r.Node); err != nil {
		return nil, err
	}
	if state, why := config.Operator(facts.Node.Labels); state == config.OperatorManaged {
		return r.hold(ctx, log, facts.Node, why)
	}
	if r.ReadHost != nil {
		facts.Host = r.ReadHost()
	}
	results := make([]Result, len(r.Checks))
	status := Status{}
	for i, c := range r.Checks {
		res := Result{Ready: true, Reason: "entry: node selected by the policy"}
		if c.Check != nil {
			res = c.Check(facts)
		}
		results[i] = res
		status[c.Stage] = StageStatus{Ready: res.Ready, Reason: res.Reason}
	}
	statusJSON, err := json.Marshal(status)
	if err != nil {
		return status, err
	}
	var before *corev1.Node
	plan := func(node *corev1.Node) []nodeapi.Change {
		if before == nil {
			before = node.DeepCopy()
		}
		return r.plan(node, results, string(statusJSON))
	}
	node, err := nodeapi.ConvergeFrom(ctx, r.Client, facts.Node, plan)
	if err != nil {
		return status, err
	}
	r.logChanges(log, before, node)
	r.postTransitions(ctx, log, before, node, status)
	cond, reason, message := r.condition(node, results)
	if _, err := r.setCondition(ctx, log, node, cond, reason, message); err != nil {
		return status, err
	}
	return status, nil
}

// hold is a pass on a node the GPU Operator still manages: its gpu.deploy labels are the
// operator's, so the pass changes no label or annotation (opening one would start gpupolicy's
// DaemonSets beside the operator's, closing one would take the operator's away) and only says
// so, in the GPUStackReady condition and an Event when the hold begins.
func (r *Reconciler) hold(ctx context.Context, log *slog.Logger, node *corev1.Node, why string) (Status, error) {
	status := Status{}
	for _, c := range r.Checks {
		status[c.Stage] = StageStatus{Reason: "held: " + why}
	}
	changed, err := r.setCondition(ctx, log, node, corev1.ConditionFalse, config.ReasonGPUOperatorManaged, bound(why))
	if err != nil {
		return status, err
	}
	if changed {
		log.Info("holding the node for the GPU Operator", "reason", why)
		if err := nodeapi.Event(ctx, r.Client, node, "gpu-node-agent", corev1.EventTypeNormal, config.ReasonGPUOperatorManaged, why); err != nil {
			log.Warn("could not post event", "error", err)
		}
	}
	return status, nil
}

// maxConditionMessage bounds the condition's message: a stage reason quotes containerd's or
// the driver's own error text, and every `kubectl get node -o yaml` carries it.
const maxConditionMessage = 1024

// condition is the GPUStackReady verdict on node once its gates converged with results: the
// first stage (in check order) that is not ready, or whose labels a person opted out, names
// the reason; a stage's opt-outs come before the next stage's check, which they starve.
func (r *Reconciler) condition(node *corev1.Node, results []Result) (corev1.ConditionStatus, string, string) {
	var verified []string
	for i, c := range r.Checks {
		if c.SkipCondition {
			continue
		}
		if res := results[i]; !res.Ready {
			reason := cmp.Or(res.ConditionReason, camel(c.Stage)+"NotReady")
			msg := fmt.Sprintf("stage %s: %s", c.Stage, res.Reason)
			if a := node.Annotations[config.AnnotationAdoptedGates]; a != "" {
				msg += "; kept open from the GPU Operator until gpupolicy's stages verify them: " + a
			}
			return corev1.ConditionFalse, reason, bound(msg)
		}
		if c.Check != nil {
			verified = append(verified, c.Stage)
		}
		for _, l := range c.Opens {
			if node.Labels[l] == config.GateOptOut {
				return corev1.ConditionFalse, config.ReasonOptedOut, bound(fmt.Sprintf("label %s=%s: a person opted this node out of that stage (remove the label to opt back in)", l, config.GateOptOut))
			}
		}
	}
	return corev1.ConditionTrue, config.ReasonStackReady, bound("stages verified: " + strings.Join(verified, ", "))
}

// setCondition writes the GPUStackReady condition only when its status, reason or message
// changed (and says whether it did), so a settled fleet costs the API server no status write
// per interval. lastTransitionTime moves only when the status flips; lastHeartbeatTime is the
// last write.
func (r *Reconciler) setCondition(ctx context.Context, log *slog.Logger, node *corev1.Node, status corev1.ConditionStatus, reason, message string) (bool, error) {
	cur := nodeapi.FindCondition(node, config.ConditionGPUStackReady)
	if cur != nil && cur.Status == status && cur.Reason == reason && cur.Message == message {
		return false, nil
	}
	clock := r.now
	if clock == nil {
		clock = time.Now
	}
	now := metav1.NewTime(clock())
	cond := corev1.NodeCondition{
		Type: config.ConditionGPUStackReady, Status: status, Reason: reason, Message: message,
		LastHeartbeatTime: now, LastTransitionTime: now,
	}
	if cur != nil && cur.Status == status {
		cond.LastTransitionTime = cur.LastTransitionTime
	}
	if _, err := nodeapi.SetCondition(ctx, r.Client, r.Node, cond); err != nil {
		return false, err
	}
	log.Info("condition changed", "condition", config.ConditionGPUStackReady, "status", status, "reason", reason)
	return true, nil
}

// camel turns a stage name ("container-toolkit") into a condition reason prefix
// ("ContainerToolkit").
func camel(s string) string {
	var b strings.Builder
	for _, w := range strings.FieldsFunc(s, func(r rune) bool { return r == '-' || r == '_' || r == '.' }) {
		b.WriteString(strings.ToUpper(w[:1]) + w[1:])
	}
	return b.String()
}

// bound cuts s to maxConditionMessage bytes on a rune boundary.
func bound(s string) string {
	if len(s) <= maxConditionMessage {
		return s
	}
	const ellipsis = "…"
	cut := maxConditionMessage - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}

// plan lists the remaining patches: close downstream labels (last stage first), then the
// checks' own labels and annotations, then open labels (first stage first), then the status.
func (r *Reconciler) plan(node *corev1.Node, results []Result, statusJSON string) []nodeapi.Change {
	labels, annotations := node.Labels, node.Annotations
	state, _ := config.Operator(labels)
	handedOver := state == config.OperatorHandedOver
	want, adopted := r.wanted(node, results, handedOver)
	var steps []nodeapi.Change
	if handedOver {
		// Handed over: the operator's own labels go, and the shared gates it left open are
		// recorded as adopted in the same patch (after it, nothing else says they were).
		drop := nodeapi.Change{Labels: map[string]*string{}, Annotations: map[string]*string{config.AnnotationAdoptedGates: nil}}
		for _, l := range append(slices.Clone(config.OperatorOnlyLabels), config.OperatorUpgradeStateLabel) {
			if _, ok := labels[l]; ok {
				drop.Labels[l] = nil
			}
		}
		if _, ok := annotations[config.OperatorUpgradeAnnotation]; ok {
			drop.Annotations[config.OperatorUpgradeAnnotation] = nil
		}
		if adopted != "" {
			drop.Annotations[config.AnnotationAdoptedGates] = nodeapi.Value(adopted)
		}
		steps = append(steps, drop)
	}
	// The record changes after the label patches: a gate whose adoption ended closes before
	// the record that held it open goes.
	var record *nodeapi.Change
	if cur, ok := annotations[config.AnnotationAdoptedGates]; !handedOver && ok && cur != adopted {
		record = &nodeapi.Change{Annotations: map[string]*string{config.AnnotationAdoptedGates: nil}}
		if adopted != "" {
			record.Annotations[config.AnnotationAdoptedGates] = nodeapi.Value(adopted)
		}
	}
	for i := len(r.Checks) - 1; i >= 0; i-- {
		opens := r.Checks[i].Opens
		for j := len(opens) - 1; j >= 0; j-- {
			l := opens[j]
			if v, ok := labels[l]; ok && !want[l] && v != config.GateOptOut {
				steps = append(steps, nodeapi.Change{Labels: map[string]*string{l: nil}})
			}
		}
	}
	ownLabels, ownAnnotations := map[string]string{}, map[string]string{}
	for _, res := range results {
		maps.Copy(ownLabels, res.Labels)
		maps.Copy(ownAnnotations, res.Annotations)
	}
	if own := nodeapi.Diff(node, ownLabels, ownAnnotations); !own.Empty() {
		steps = append(steps, own)
	}
	for _, c := range r.Checks {
		for _, l := range c.Opens {
			if v, ok := labels[l]; want[l] && (!ok || (v != config.GateOpen && v != config.GateOptOut)) {
				steps = append(steps, nodeapi.Change{Labels: map[string]*string{l: nodeapi.Value(config.GateOpen)}})
			}
		}
	}
	if record != nil {
		steps = append(steps, *record)
	}
	if annotations[config.AnnotationGateStatus] != statusJSON {
		steps = append(steps, nodeapi.Change{Annotations: map[string]*string{config.AnnotationGateStatus: nodeapi.Value(statusJSON)}})
	}
	return steps
}

// wanted says which gate labels should be open: those whose stage and every stage before it
// are ready, plus adopted gates (open at hand-over, or listed in config.AnnotationAdoptedGates)
// whose blocking stages are only pending. adopted is the record to keep while any adopted gate
// is held open past its verdict: every adopted gate still open, sorted and comma-separated (""
// ends the adoption: every gate follows the verdicts, or a check failed).
func (r *Reconciler) wanted(node *corev1.Node, results []Result, handedOver bool) (want map[string]bool, adopted string) {
	from := map[string]bool{}
	if handedOver {
		for _, c := range r.Checks {
			for _, l := range c.Opens {
				from[l] = node.Labels[l] == config.GateOpen
			}
		}
	} else if v := node.Annotations[config.AnnotationAdoptedGates]; v != "" {
		for _, l := range strings.Split(v, ",") {
			from[l] = true
		}
	}
	want = map[string]bool{}
	var held []string
	ready, pending := true, true
	for i, c := range r.Checks {
		ready = ready && results[i].Ready
		pending = pending && (results[i].Ready || results[i].Pending)
		for _, l := range c.Opens {
			want[l] = ready || (from[l] && pending)
			if !ready && want[l] {
				held = append(held, l)
			}
		}
	}
	if len(held) == 0 {
		return want, ""
	}
	// While any gate is held, the record keeps every adopted gate still open, so a stage that
	// turns ready and then pending again (the toolkit re-verifying) does not drop the others.
	var keep []string
	for l, ok := range from {
		if ok && want[l] {
			keep = append(keep, l)
		}
	}
	slices.Sort(keep)
	return want, strings.Join(keep, ",")
}

func (r *Reconciler) logChanges(log *slog.Logger, before, after *corev1.Node) {
	for _, l := range config.OperatorOnlyLabels {
		if _, had := before.Labels[l]; had {
			if _, has := after.Labels[l]; !has {
				log.Info("GPU Operator label removed: the node was handed over", "label", l)
			}
		}
	}
	for _, c := range r.Checks {
		for _, l := range c.Opens {
			old, hadOld := before.Labels[l]
			cur, has := after.Labels[l]
			if old == cur && hadOld == has {
				continue
			}
			switch {
			case has && cur == config.GateOpen:
				log.Info("gate opened", "stage", c.Stage, "label", l)
			case !has:
				log.Info("gate closed", "stage", c.Stage, "label", l)
			}
		}
	}
}

// postTransitions posts an Event for every stage whose verdict differs from the one the node
// carried before; the annotation persists the last verdict, so a restarted agent stays quiet.
func (r *Reconciler) postTransitions(ctx context.Context, log *slog.Logger, before, after *corev1.Node, status Status) {
	var prev Status
	if raw := before.Annotations[config.AnnotationGateStatus]; raw != "" {
		if err := json.Unmarshal([]byte(raw), &prev); err != nil {
			log.Warn("ignoring unreadable gate-status annotation", "error", err)
		}
	}
	for _, c := range r.Checks {
		cur := status[c.Stage]
		if old, ok := prev[c.Stage]; ok && old == cur {
			continue
		}
		typ, reason := corev1.EventTypeNormal, "StageReady"
		if !cur.Ready {
			typ, reason = corev1.EventTypeWarning, "StageNotReady"
		}
		log.Info("stage verdict changed", "stage", c.Stage, "ready", cur.Ready, "reason", cur.Reason)
		msg := fmt.Sprintf("stage %s: %s", c.Stage, cur.Reason)
		if err := nodeapi.Event(ctx, r.Client, after, "gpu-node-agent", typ, reason, msg); err != nil {
			log.Warn("could not post event", "stage", c.Stage, "error", err)
		}
	}
}

// Backoff bounds of Run after a failed reconcile (API server down, node not registered yet).
const (
	minBackoff = time.Second
)

// Run reconciles now, whenever Wake fires (a host file or the Node changed), and every
// interval as a resync safety net, until ctx is done. A burst of wake-ups costs one reconcile.
// A failed reconcile is retried with exponential backoff (from 1s, capped at interval) that
// wake-ups do not cut short, and never ends the loop.
func (r *Reconciler) Run(ctx context.Context, interval time.Duration) error {
	if err := r.validate(); err != nil {
		return err
	}
	if interval <= 0 {
		return fmt.Errorf("gate: interval must be positive, got %s", interval)
	}
	log := r.logger()
	backoff := minBackoff
	why := []string{"start"}
	for {
		if len(why) > 0 {
			log.Debug("reconciling", "stage", "gate", "because", why)
		}
		wait := interval
		wake := r.Wake.C()
		if _, err := r.Reconcile(ctx); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			wait = min(backoff, interval)
			backoff *= 2
			wake = nil
			log.Warn("reconcile failed; retrying", "stage", "gate", "error", err, "retryIn", wait)
		} else {
			backoff = minBackoff
		}
		// Jitter spreads the agents of a large fleet after an API server restart.
		wait += time.Duration(rand.Int64N(int64(wait)/10 + 1))
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-timer.C:
		case <-wake:
			timer.Stop()
		}
		why = r.Wake.Take()
	}
}
