package gate

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gpupolicy/gpupolicy/plugin/agent/nodeapi"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

const node = "gpu-1"

func newNode(labels map[string]string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node, Labels: labels, ResourceVersion: "1"}}
}

// checks mirrors the production stage layout with switchable verdicts.
func checks(driverOK, toolkitOK *bool) []StageCheck {
	return []StageCheck{
		{Stage: "entry", Opens: []string{config.LabelDeployDriver}},
		{Stage: config.StageDriver, Opens: []string{config.LabelDeployToolkit}, Check: func(*Facts) Result {
			return Result{Ready: *driverOK, Reason: "driver", Labels: map[string]string{config.LabelDriverVersion: "580.95.05"}}
		}},
		{Stage: config.StageToolkit, Opens: []string{config.LabelToolkitReady, config.LabelDeployDevicePlugin, config.LabelDeployExporter}, Check: func(*Facts) Result {
			return Result{Ready: *toolkitOK, Reason: "toolkit"}
		}},
	}
}

// patchedLabels lists, per node patch, the label keys it changed and how ("+k" or "-k").
func patchedLabels(t *testing.T, cs *fake.Clientset) []string {
	t.Helper()
	var out []string
	for _, a := range cs.Actions() {
		p, ok := a.(k8stesting.PatchAction)
		if !ok || a.GetResource().Resource != "nodes" || a.GetSubresource() != "" {
			continue
		}
		var body struct {
			Metadata struct {
				Labels map[string]*string `json:"labels"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(p.GetPatch(), &body); err != nil {
			t.Fatal(err)
		}
		keys := make([]string, 0, len(body.Metadata.Labels))
		for k, v := range body.Metadata.Labels {
			sign := "+"
			if v == nil {
				sign = "-"
			}
			keys = append(keys, sign+k)
		}
		slices.Sort(keys)
		out = append(out, strings.Join(keys, ","))
	}
	return out
}

// getNode reads through the tracker, bypassing reactors that simulate API failures.
func getNode(t *testing.T, cs *fake.Clientset) *corev1.Node {
	t.Helper()
	obj, err := cs.Tracker().Get(schema.GroupVersionResource{Version: "v1", Resource: "nodes"}, "", node)
	if err != nil {
		t.Fatal(err)
	}
	return obj.(*corev1.Node)
}

func TestOpensInOrderAndClosesInReverse(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset(newNode(map[string]string{"pool": "a"}))
	driverOK, toolkitOK := true, true
	r := &Reconciler{Client: cs, Node: node, Checks: checks(&driverOK, &toolkitOK)}
	if _, err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"+" + config.LabelDriverVersion,
		"+" + config.LabelDeployDriver,
		"+" + config.LabelDeployToolkit,
		"+" + config.LabelToolkitReady,
		"+" + config.LabelDeployDevicePlugin,
		"+" + config.LabelDeployExporter,
		"", // gate-status annotation
	}
	if got := patchedLabels(t, cs); !slices.Equal(got, want) {
		t.Fatalf("open order\n got %q\nwant %q", got, want)
	}
	n := getNode(t, cs)
	if n.Labels["pool"] != "a" || n.Labels[config.LabelDeployExporter] != "true" {
		t.Fatalf("labels after open: %v", n.Labels)
	}

	cs.ClearActions()
	driverOK = false
	st, err := r.Reconcile(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st[config.StageDriver].Ready || !st["entry"].Ready {
		t.Fatalf("status %v", st)
	}
	want = []string{
		"-" + config.LabelDeployExporter,
		"-" + config.LabelDeployDevicePlugin,
		"-" + config.LabelToolkitReady,
		"-" + config.LabelDeployToolkit,
		"",
	}
	if got := patchedLabels(t, cs); !slices.Equal(got, want) {
		t.Fatalf("close order\n got %q\nwant %q", got, want)
	}
	n = getNode(t, cs)
	if n.Labels[config.LabelDeployDriver] != "true" || n.Labels["pool"] != "a" {
		t.Fatalf("upstream/foreign labels lost: %v", n.Labels)
	}
	var ann Status
	if err := json.Unmarshal([]byte(n.Annotations[config.AnnotationGateStatus]), &ann); err != nil || ann[config.StageDriver].Ready {
		t.Fatalf("gate-status annotation %q (%v)", n.Annotations[config.AnnotationGateStatus], err)
	}

	// Nothing changed: no patch at all.
	cs.ClearActions()
	if _, err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if got := patchedLabels(t, cs); len(got) != 0 {
		t.Fatalf("idempotent reconcile patched %q", got)
	}
}

func TestNeverOverwritesOptOut(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset(newNode(map[string]string{
		config.LabelDeployDevicePlugin: "false", config.LabelDeployDriver: "false",
	}))
	ok, bad := true, false
	r := &Reconciler{Client: cs, Node: node, Checks: checks(&ok, &ok)}
	if _, err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	n := getNode(t, cs)
	if n.Labels[config.LabelDeployDevicePlugin] != "false" || n.Labels[config.LabelDeployDriver] != "false" {
		t.Fatalf("opt-out overwritten: %v", n.Labels)
	}
	if n.Labels[config.LabelDeployExporter] != "true" || n.Labels[config.LabelDeployToolkit] != "true" {
		t.Fatalf("other gates not opened: %v", n.Labels)
	}
	r.Checks = checks(&bad, &bad)
	if _, err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	n = getNode(t, cs)
	if n.Labels[config.LabelDeployDevicePlugin] != "false" {
		t.Fatalf("opt-out removed on close: %v", n.Labels)
	}
	if _, has := n.Labels[config.LabelDeployExporter]; has {
		t.Fatalf("exporter gate not closed: %v", n.Labels)
	}
}

func TestEventsOnlyOnTransitions(t *testing.T) {
	ctx := context.Background()
	cs := fake.NewClientset(newNode(nil))
	driverOK, toolkitOK := true, false
	r := &Reconciler{Client: cs, Node: node, Checks: checks(&driverOK, &toolkitOK)}
	for range 3 {
		if _, err := r.Reconcile(ctx); err != nil {
			t.Fatal(err)
		}
	}
	evs, _ := cs.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
	if len(evs.Items) != 3 { // one per stage on first sight
		t.Fatalf("want 3 events, got %d", len(evs.Items))
	}
	toolkitOK = true
	if _, err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	evs, _ = cs.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
	if len(evs.Items) != 4 {
		t.Fatalf("want 4 events after toolkit became ready, got %d", len(evs.Items))
	}
	for _, e := range evs.Items {
		if e.InvolvedObject.Kind != "Node" || e.InvolvedObject.Name != node {
			t.Fatalf("event on %v", e.InvolvedObject)
		}
	}
}

func TestRejectsForeignKeys(t *testing.T) {
	cs := fake.NewClientset(newNode(nil))
	r := &Reconciler{Client: cs, Node: node, Checks: []StageCheck{{Stage: "x", Opens: []string{"example.com/x"}}}}
	if _, err := r.Reconcile(context.Background()); err == nil || !strings.Contains(err.Error(), "outside nvidia.com/") {
		t.Fatalf("want prefix error, got %v", err)
	}
	r.Checks = []StageCheck{{Stage: "x", Check: func(*Facts) Result {
		return Result{Ready: true, Labels: map[string]string{"kubernetes.io/hostname": "evil"}}
	}}}
	if _, err := r.Reconcile(context.Background()); err == nil || !strings.Contains(err.Error(), "only manages keys under") {
		t.Fatalf("want refusal, got %v", err)
	}
	if n := getNode(t, cs); n.Labels["kubernetes.io/hostname"] != "" {
		t.Fatal("foreign label written")
	}
}

func TestConflictReplans(t *testing.T) {
	cs := fake.NewClientset(newNode(nil))
	var conflicts atomic.Int32
	cs.PrependReactor("patch", "nodes", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if conflicts.Add(1) == 1 {
			// A person opts the node out of the driver stage between our read and our patch.
			// (the tracker, not the clientset: the fake holds its lock while reacting)
			gvr := schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
			obj, err := cs.Tracker().Get(gvr, "", node)
			if err != nil {
				t.Error(err)
			}
			n := obj.(*corev1.Node)
			n.Labels = map[string]string{config.LabelDeployDriver: "false"}
			if err := cs.Tracker().Update(gvr, n, ""); err != nil {
				t.Error(err)
			}
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "nodes"}, node, errors.New("rv changed"))
		}
		return false, nil, nil
	})
	ok := true
	r := &Reconciler{Client: cs, Node: node, Checks: checks(&ok, &ok)}
	if _, err := r.Reconcile(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := getNode(t, cs); n.Labels[config.LabelDeployDriver] != "false" || n.Labels[config.LabelDeployToolkit] != "true" {
		t.Fatalf("after conflict: %v", n.Labels)
	}
}

func TestRunSurvivesAPIOutage(t *testing.T) {
	cs := fake.NewClientset(newNode(nil))
	var calls atomic.Int32
	cs.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if calls.Add(1) <= 2 {
			return true, nil, apierrors.NewServiceUnavailable("apiserver restarting")
		}
		return false, nil, nil
	})
	ok := true
	r := &Reconciler{Client: cs, Node: node, Checks: checks(&ok, &ok)}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, 2*time.Second) }()
	for ctx.Err() == nil {
		if n := getNode(t, cs); n.Labels[config.LabelDeployExporter] == "true" {
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("Run returned %v", err)
			}
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("gates never opened after the API came back")
}

// BenchmarkReconcileSteadyState is the per-interval cost on a node whose gates are settled:
// every check runs, one GET, no patch.
func BenchmarkReconcileSteadyState(b *testing.B) {
	cs := fake.NewClientset(newNode(nil))
	ok := true
	r := &Reconciler{Client: cs, Node: node, Checks: checks(&ok, &ok), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	ctx := context.Background()
	if _, err := r.Reconcile(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.Reconcile(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

// statusPatches are the bodies of the node status patches sent.
func statusPatches(cs *fake.Clientset) []string {
	var out []string
	for _, a := range cs.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok && a.GetResource().Resource == "nodes" && a.GetSubresource() == "status" {
			out = append(out, string(p.GetPatch()))
		}
	}
	return out
}

func stackCondition(t *testing.T, cs *fake.Clientset) corev1.NodeCondition {
	t.Helper()
	for _, c := range getNode(t, cs).Status.Conditions {
		if c.Type == config.ConditionGPUStackReady {
			return c
		}
	}
	t.Fatal("no GPUStackReady condition")
	return corev1.NodeCondition{}
}

// The condition follows the first failing stage, is written only when it changes, keeps its
// transition time while the status stays, and leaves the kubelet's conditions alone.
func TestConditionFollowsTheGates(t *testing.T) {
	ctx := context.Background()
	kubelet := []corev1.NodeCondition{
		{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status"},
		{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory"},
	}
	n := newNode(nil)
	n.Status.Conditions = kubelet
	cs := fake.NewClientset(n)
	clock := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	tick := func() { clock = clock.Add(time.Minute) }
	driverOK, toolkitOK := true, false
	r := &Reconciler{Client: cs, Node: node, Checks: checks(&driverOK, &toolkitOK), now: func() time.Time { return clock }}
	reconcile := func() {
		t.Helper()
		cs.ClearActions()
		if _, err := r.Reconcile(ctx); err != nil {
			t.Fatal(err)
		}
	}

	reconcile()
	c := stackCondition(t, cs)
	if c.Status != corev1.ConditionFalse || c.Reason != "ContainerToolkitNotReady" || c.Message != "stage container-toolkit: toolkit" {
		t.Fatalf("toolkit not ready: %+v", c)
	}
	if !c.LastTransitionTime.Time.Equal(clock) || !c.LastHeartbeatTime.Time.Equal(clock) {
		t.Fatalf("first write times %+v, want %s", c, clock)
	}
	first := clock

	// Nothing changed: no status patch, not even a heartbeat.
	tick()
	reconcile()
	if p := statusPatches(cs); len(p) != 0 {
		t.Fatalf("unchanged condition patched: %q", p)
	}
	if c := stackCondition(t, cs); !c.LastHeartbeatTime.Time.Equal(first) {
		t.Fatalf("heartbeat bumped without a change: %+v", c)
	}

	// Same status, another stage and reason: the message moves, the transition time stays.
	tick()
	driverOK = false
	reconcile()
	c = stackCondition(t, cs)
	if c.Status != corev1.ConditionFalse || c.Reason != "DriverNotReady" || !c.LastTransitionTime.Time.Equal(first) || !c.LastHeartbeatTime.Time.Equal(clock) {
		t.Fatalf("driver not ready: %+v (transition must stay %s)", c, first)
	}

	// Status flips: the transition time moves.
	tick()
	driverOK, toolkitOK = true, true
	reconcile()
	c = stackCondition(t, cs)
	if c.Status != corev1.ConditionTrue || c.Reason != config.ReasonStackReady || c.Message != "stages verified: driver, container-toolkit" || !c.LastTransitionTime.Time.Equal(clock) {
		t.Fatalf("stack ready: %+v", c)
	}
	if p := statusPatches(cs); len(p) != 1 || strings.Count(p[0], `"type":`) != 1 {
		t.Fatalf("status patches %q: want one carrying only %s", p, config.ConditionGPUStackReady)
	}

	// A person's opt-out on a ready stage's label: OptedOut, though every check passes.
	tick()
	opted := getNode(t, cs)
	opted.Labels[config.LabelDeployDevicePlugin] = config.GateOptOut
	if err := cs.Tracker().Update(schema.GroupVersionResource{Version: "v1", Resource: "nodes"}, opted, ""); err != nil {
		t.Fatal(err)
	}
	reconcile()
	c = stackCondition(t, cs)
	if c.Status != corev1.ConditionFalse || c.Reason != config.ReasonOptedOut || !strings.Contains(c.Message, config.LabelDeployDevicePlugin+"=false") {
		t.Fatalf("opted out: %+v", c)
	}

	after := getNode(t, cs)
	if len(after.Status.Conditions) != 3 {
		t.Fatalf("conditions %+v: want the kubelet's two and %s", after.Status.Conditions, config.ConditionGPUStackReady)
	}
	for _, want := range kubelet {
		if got := nodeapi.FindCondition(after, want.Type); got == nil || *got != want {
			t.Fatalf("kubelet condition %s changed: %+v, want %+v", want.Type, got, want)
		}
	}
}

// A check's own condition reason wins; a never-ready stage kept out of the condition (the
// disabled stages' gate holder) does not hold it back; a long reason is cut on a rune.
func TestConditionReasonAndBounds(t *testing.T) {
	ok := true
	long := strings.Repeat("é", maxConditionMessage)
	r := &Reconciler{Node: node, Checks: []StageCheck{
		{Stage: "entry", Opens: []string{config.LabelDeployDriver}},
		{Stage: config.StageDriver, Opens: []string{config.LabelDeployToolkit}, Check: func(*Facts) Result {
			return Result{Ready: ok, Reason: long, ConditionReason: config.ReasonDriverDrift}
		}},
		{Stage: "disabled", Opens: []string{config.LabelDeployExporter}, Check: Static(false, "disabled"), SkipCondition: true},
	}}
	n := newNode(map[string]string{config.LabelDeployExporter: config.GateOptOut})
	results := []Result{{Ready: true}, r.Checks[1].Check(&Facts{}), r.Checks[2].Check(&Facts{})}
	status, reason, msg := r.condition(n, results)
	if status != corev1.ConditionTrue || reason != config.ReasonStackReady {
		t.Fatalf("skipped stage held the condition: %s %s %s", status, reason, msg)
	}
	ok = false
	results[1] = r.Checks[1].Check(&Facts{})
	status, reason, msg = r.condition(n, results)
	if status != corev1.ConditionFalse || reason != config.ReasonDriverDrift || len(msg) > maxConditionMessage || !utf8.ValidString(msg) || !strings.HasSuffix(msg, "…") {
		t.Fatalf("drift: %s %s, message of %d bytes (valid UTF-8 %v)", status, reason, len(msg), utf8.ValidString(msg))
	}
}

func TestSetConditionRefusesOtherTypes(t *testing.T) {
	cs := fake.NewClientset(newNode(nil))
	_, err := nodeapi.SetCondition(context.Background(), cs, node, corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionFalse})
	if err == nil || !strings.Contains(err.Error(), "only manages condition "+config.ConditionGPUStackReady) {
		t.Fatalf("want refusal, got %v", err)
	}
	if p := statusPatches(cs); len(p) != 0 {
		t.Fatalf("patched %q", p)
	}
}

// A node the GPU Operator manages is held: no label or annotation is written (its gates are
// the operator's), the condition and one Event say why. Handed over with the operator's own
// switch, the next pass removes the operator-only labels and adopts the gates it shares with
// the operator, setting each to its own verdict.
func TestHoldsOperatorNodesUntilHandedOver(t *testing.T) {
	ctx := context.Background()
	operator := map[string]string{
		config.LabelGPUPresent:                            "true",
		config.LabelDeployDriver:                          "true",
		config.LabelDeployToolkit:                         "true",
		config.LabelDeployDevicePlugin:                    "true",
		config.LabelDeployExporter:                        "true",
		config.LabelOperatorValidator:                     "true",
		config.LabelDeployPrefix + "dcgm":                 "true",
		config.LabelDeployPrefix + "node-status-exporter": "true",
	}
	cs := fake.NewClientset(newNode(operator))
	driverOK, toolkitOK := true, false
	r := &Reconciler{Client: cs, Node: node, Checks: checks(&driverOK, &toolkitOK)}
	for range 3 {
		st, err := r.Reconcile(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st[config.StageDriver].Ready || !strings.Contains(st[config.StageDriver].Reason, "GPU Operator manages") {
			t.Fatalf("held status: %+v", st)
		}
	}
	if p := patchedLabels(t, cs); len(p) != 0 {
		t.Fatalf("a held node's labels were patched: %v", p)
	}
	n := getNode(t, cs)
	if _, ok := n.Annotations[config.AnnotationGateStatus]; ok {
		t.Fatal("a held node got the gate-status annotation")
	}
	if c := stackCondition(t, cs); c.Status != corev1.ConditionFalse || c.Reason != config.ReasonGPUOperatorManaged || !strings.Contains(c.Message, config.LabelOperatorValidator) {
		t.Fatalf("condition: %+v", c)
	}
	if p := statusPatches(cs); len(p) != 1 {
		t.Fatalf("want one condition write over three held passes, got %d", len(p))
	}
	evs, _ := cs.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
	if len(evs.Items) != 1 || evs.Items[0].Reason != config.ReasonGPUOperatorManaged {
		t.Fatalf("want one GPUOperatorManaged event, got %+v", evs.Items)
	}

	// Hand-over: the person sets the operator's switch.
	n.Labels[config.LabelOperatorOperands] = "false"
	if err := cs.Tracker().Update(schema.GroupVersionResource{Version: "v1", Resource: "nodes"}, n, ""); err != nil {
		t.Fatal(err)
	}
	cs.ClearActions()
	if _, err := r.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	got := getNode(t, cs).Labels
	for _, l := range config.OperatorOnlyLabels {
		if _, ok := got[l]; ok {
			t.Errorf("operator-only label %s left after the hand-over", l)
		}
	}
	// Adopted: the driver gate stays open (entry), the toolkit gate stays open (driver ready),
	// and the device plugin and exporter gates close, since this node's toolkit check failed
	// (not pending: TestAdoptsOperatorGatesWhileOwnStagesPending).
	for l, want := range map[string]string{config.LabelDeployDriver: "true", config.LabelDeployToolkit: "true", config.LabelOperatorOperands: "false", config.LabelDeployDevicePlugin: "", config.LabelDeployExporter: ""} {
		if got[l] != want {
			t.Errorf("after the hand-over %s = %q, want %q", l, got[l], want)
		}
	}
	if p := patchedLabels(t, cs); len(p) == 0 || !strings.Contains(p[0], "-"+config.LabelOperatorValidator) {
		t.Fatalf("the operator's labels must go first: %v", p)
	}
	if c := stackCondition(t, cs); c.Reason == config.ReasonGPUOperatorManaged {
		t.Fatalf("condition still held: %+v", c)
	}
}

// TestAdoptsOperatorGatesWhileOwnStagesPending: at hand-over the operator's open gates stay
// open while gpupolicy's own check behind them is only pending (its toolkit stage has not run
// on the node yet), so the operator's device plugin keeps the node's GPUs advertised; the
// record goes when the check verifies, and a failed check closes the gates as on any node.
func TestAdoptsOperatorGatesWhileOwnStagesPending(t *testing.T) {
	ctx := context.Background()
	handedOver := map[string]string{
		config.LabelGPUPresent:         "true",
		config.LabelDeployDriver:       "true",
		config.LabelDeployToolkit:      "true",
		config.LabelDeployDevicePlugin: "true",
		config.LabelOperatorValidator:  "true",
		config.LabelOperatorOperands:   "false",
		// The operator's driver upgrade controller's state goes with its labels.
		config.OperatorUpgradeStateLabel: "upgrade-done",
	}
	toolkit := Result{Reason: "no toolkit status file", Pending: true}
	driverOK := true
	cks := checks(&driverOK, nil)
	cks[2].Check = func(*Facts) Result { return toolkit }
	cs := fake.NewClientset(newNode(handedOver))
	r := &Reconciler{Client: cs, Node: node, Checks: cks}
	pass := func() *corev1.Node {
		t.Helper()
		if _, err := r.Reconcile(ctx); err != nil {
			t.Fatal(err)
		}
		return getNode(t, cs)
	}
	expect := func(n *corev1.Node, record string, labels map[string]string) {
		t.Helper()
		if got := n.Annotations[config.AnnotationAdoptedGates]; got != record {
			t.Errorf("%s = %q, want %q", config.AnnotationAdoptedGates, got, record)
		}
		for l, want := range labels {
			if got := n.Labels[l]; got != want {
				t.Errorf("%s = %q, want %q", l, got, want)
			}
		}
	}
	adopted := []string{config.LabelDeployDevicePlugin, config.LabelDeployDriver, config.LabelDeployToolkit}
	slices.Sort(adopted)
	record := strings.Join(adopted, ",")

	n := pass()
	expect(n, record, map[string]string{config.LabelDeployDevicePlugin: "true", config.LabelToolkitReady: "", config.LabelOperatorValidator: "", config.OperatorUpgradeStateLabel: ""})
	if p := patchedLabels(t, cs); slices.ContainsFunc(p, func(s string) bool { return strings.Contains(s, "-"+config.LabelDeployDevicePlugin) }) {
		t.Fatalf("the adopted device plugin gate closed during the hand-over: %v", p)
	}
	if c := stackCondition(t, cs); c.Status != corev1.ConditionFalse || !strings.Contains(c.Message, "kept open from the GPU Operator") {
		t.Fatalf("condition while adopted: %+v", c)
	}
	// Later passes, still pending: nothing moves.
	cs.ClearActions()
	expect(pass(), record, map[string]string{config.LabelDeployDevicePlugin: "true"})
	if p := patchedLabels(t, cs); len(p) != 0 {
		t.Fatalf("a settled adopted node was patched: %v", p)
	}

	// gpupolicy's toolkit verifies the node: the record goes, its own labels open.
	toolkit = Result{Ready: true, Reason: "verified"}
	expect(pass(), "", map[string]string{config.LabelDeployDevicePlugin: "true", config.LabelToolkitReady: "true"})
	if c := stackCondition(t, cs); c.Status != corev1.ConditionTrue {
		t.Fatalf("condition after verification: %+v", c)
	}
	// Pending again (a toolkit reinstall): the adoption ended, so the gates follow the verdict.
	toolkit = Result{Reason: "no toolkit status file", Pending: true}
	expect(pass(), "", map[string]string{config.LabelDeployDevicePlugin: "", config.LabelToolkitReady: ""})

	// A failed check ends an adoption: a second hand-over, then the toolkit install fails.
	cs2 := fake.NewClientset(newNode(handedOver))
	r.Client = cs2
	cs = cs2
	expect(pass(), record, map[string]string{config.LabelDeployDevicePlugin: "true"})
	toolkit = Result{Reason: "toolkit install failed: containerd refused the drop-in"}
	expect(pass(), "", map[string]string{config.LabelDeployDevicePlugin: "", config.LabelDeployToolkit: "true"})
}
