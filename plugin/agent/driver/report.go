package driver

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpupolicy/gpupolicy/plugin/agent/nodeapi"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// Publish puts a verdict on the node: the driver version label, the drift label and
// annotation, and an Event when the drift changed (found, cleared, or a different version).
func Publish(ctx context.Context, client kubernetes.Interface, node string, v Verdict, log *slog.Logger) error {
	labels, annotations := v.Labels()
	var before *corev1.Node
	after, err := nodeapi.Converge(ctx, client, node, func(n *corev1.Node) []nodeapi.Change {
		if before == nil {
			before = n.DeepCopy()
		}
		if c := nodeapi.Diff(n, labels, annotations); !c.Empty() {
			return []nodeapi.Change{c}
		}
		return nil
	})
	if err != nil {
		return err
	}
	was, now := before.Annotations[config.AnnotationDriverDrift], annotations[config.AnnotationDriverDrift]
	if was == now {
		return nil
	}
	typ, reason, msg := corev1.EventTypeWarning, "DriverDrift", "driver drift: "+now
	if now == "" {
		typ, reason, msg = corev1.EventTypeNormal, "DriverDriftResolved", fmt.Sprintf("driver %s matches the policy's %s", v.Found, v.Expected)
	}
	log.Info("driver drift changed", "node", node, "stage", config.StageDriver, "expected", v.Expected, "found", v.Found, "drift", v.Drift)
	return nodeapi.Event(ctx, client, after, "gpu-node-agent", typ, reason, msg)
}

// Health serves a watching program's readiness. Readiness says the program works, not what it
// found: 503 before its first pass (or while a pass could not run at all), 200 with the verdict
// as the body once a pass completed, whatever that verdict is. The verdict about the node lives
// in the gate labels, the GPUStackReady condition, Events and metrics; a pod that went unready
// on a bad node would keep its DaemonSet unavailable and, under Flux's wait or an Argo CD wave,
// hold every later stage back on every other node too.
type Health struct {
	mu     sync.Mutex
	ok     bool
	reason string
}

// Set records the latest pass: ok when the program did its job, reason what it found.
func (h *Health) Set(ok bool, reason string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ok, h.reason = ok, reason
}

func (h *Health) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	h.mu.Lock()
	ok, reason := h.ok, h.reason
	h.mu.Unlock()
	if reason == "" {
		reason = "not checked yet"
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if !ok {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	fmt.Fprintln(w, reason)
}

// ValidatorReadiness is the driver validator's readiness for one pass: every verdict, the
// driver satisfying the policy or not (drift, another branch, no module loaded, NVML refusing),
// is the program working, so it is Ready and says the verdict; the gate publishes that verdict
// on the node and keeps the later stages closed there.
func ValidatorReadiness(v Verdict) (bool, string) {
	if v.Satisfied {
		return true, "verdict: driver satisfies the policy: " + v.Reason
	}
	return true, "verdict: driver does not satisfy the policy (the gate keeps this node's later stages closed; see the node's GPUStackReady condition): " + v.Reason
}
