// Package nodeapi is the node agent's only write path to the Kubernetes API: it changes
// nvidia.com/ labels and annotations of one Node, guarded by the Node's resourceVersion so a
// value a person sets concurrently (an opt-out "false") is never overwritten, writes the
// agent's own Node condition (config.ConditionGPUStackReady), and posts Events on that Node.
package nodeapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// Change is one patch: label and annotation keys (all under config.ManagedPrefix) mapped to
// their new value, or to nil to remove the key.
type Change struct {
	Labels      map[string]*string
	Annotations map[string]*string
}

// Empty reports whether the change would patch nothing.
func (c Change) Empty() bool { return len(c.Labels) == 0 && len(c.Annotations) == 0 }

// Diff returns the change that brings the node's labels and annotations to want ("" in
// want means the key must be absent); keys not in want are left alone.
func Diff(node *corev1.Node, labels, annotations map[string]string) Change {
	return Change{Labels: diff(node.Labels, labels), Annotations: diff(node.Annotations, annotations)}
}

func diff(cur, want map[string]string) map[string]*string {
	out := map[string]*string{}
	for k, v := range want {
		old, ok := cur[k]
		switch {
		case v == "" && ok:
			out[k] = nil
		case v != "" && (!ok || old != v):
			out[k] = Value(v)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// Value returns a pointer for Change maps.
func Value(s string) *string { return &s }

// PlanFunc returns the remaining changes for the node as it is now, in the order they must
// be applied. It is called again after every applied change and after every conflict, so it
// must derive everything from the node it is given.
type PlanFunc func(node *corev1.Node) []Change

// maxSteps bounds Converge so a plan that never converges cannot loop forever.
const maxSteps = 64

// Converge reads the node and applies the first change of plan(node), one patch at a time,
// until the plan is empty. Each patch carries the resourceVersion the plan was computed
// from; on a conflict the node is read again and re-planned. Returns the final node.
func Converge(ctx context.Context, client kubernetes.Interface, name string, plan PlanFunc) (*corev1.Node, error) {
	node, err := Get(ctx, client, name)
	if err != nil {
		return nil, err
	}
	return ConvergeFrom(ctx, client, node, plan)
}

// Get reads Node name.
func Get(ctx context.Context, client kubernetes.Interface, name string) (*corev1.Node, error) {
	node, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get node %s: %w", name, err)
	}
	return node, nil
}

// ConvergeFrom is Converge from a Node already read (its resourceVersion is the first
// patch's precondition, so a Node changed since is re-read, as after any conflict).
func ConvergeFrom(ctx context.Context, client kubernetes.Interface, node *corev1.Node, plan PlanFunc) (*corev1.Node, error) {
	name := node.Name
	for range maxSteps {
		steps := plan(node)
		if len(steps) == 0 {
			return node, nil
		}
		patched, err := apply(ctx, client, node, steps[0])
		switch {
		case err == nil:
			node = patched
		case apierrors.IsConflict(err):
			if node, err = client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); err != nil {
				return nil, fmt.Errorf("get node %s after conflict: %w", name, err)
			}
		default:
			return nil, err
		}
	}
	return node, fmt.Errorf("node %s: changes did not converge after %d patches", name, maxSteps)
}

// apply sends one JSON merge patch with the node's resourceVersion as precondition.
func apply(ctx context.Context, client kubernetes.Interface, node *corev1.Node, c Change) (*corev1.Node, error) {
	for _, keys := range []map[string]*string{c.Labels, c.Annotations} {
		for k := range keys {
			if !strings.HasPrefix(k, config.ManagedPrefix) {
				return nil, fmt.Errorf("refusing to change %q on node %s: the agent only manages keys under %s", k, node.Name, config.ManagedPrefix)
			}
		}
	}
	meta := map[string]any{"resourceVersion": node.ResourceVersion}
	if len(c.Labels) > 0 {
		meta["labels"] = c.Labels
	}
	if len(c.Annotations) > 0 {
		meta["annotations"] = c.Annotations
	}
	body, err := json.Marshal(map[string]any{"metadata": meta})
	if err != nil {
		return nil, err
	}
	out, err := client.CoreV1().Nodes().Patch(ctx, node.Name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: FieldManager})
	if err != nil {
		return nil, fmt.Errorf("patch node %s: %w", node.Name, err)
	}
	return out, nil
}

// SetCondition writes one condition of the agent's own type (config.ConditionGPUStackReady)
// through the nodes/status subresource. The strategic merge patch is keyed by condition type,
// so the kubelet's conditions (Ready, MemoryPressure, ...) are never sent, let alone replaced,
// and it needs no resourceVersion: a concurrent kubelet heartbeat merges instead of conflicting.
func SetCondition(ctx context.Context, client kubernetes.Interface, name string, cond corev1.NodeCondition) (*corev1.Node, error) {
	if cond.Type != config.ConditionGPUStackReady {
		return nil, fmt.Errorf("refusing to write condition %q on node %s: the agent only manages condition %s", cond.Type, name, config.ConditionGPUStackReady)
	}
	body, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{cond}}})
	if err != nil {
		return nil, err
	}
	out, err := client.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, body, metav1.PatchOptions{FieldManager: FieldManager}, "status")
	if apierrors.IsForbidden(err) {
		// An agent image newer than its rendered RBAC or guardrails.
		return nil, fmt.Errorf("patch node %s status condition %s: %w (the agent's ClusterRole needs patch on nodes/status and the guardrails must allow it: re-render with gpupolicy-fn and apply the 00-prereqs stage)", name, cond.Type, err)
	}
	if err != nil {
		return nil, fmt.Errorf("patch node %s status condition %s: %w", name, cond.Type, err)
	}
	return out, nil
}

// FindCondition returns the node's condition of type t, or nil.
func FindCondition(node *corev1.Node, t corev1.NodeConditionType) *corev1.NodeCondition {
	for i := range node.Status.Conditions {
		if node.Status.Conditions[i].Type == t {
			return &node.Status.Conditions[i]
		}
	}
	return nil
}

// FieldManager names the agent in managedFields.
const FieldManager = "gpu-node-agent"

// EventNamespace is where Node events go (cluster-scoped objects' events live in "default",
// as the kubelet's do).
const EventNamespace = metav1.NamespaceDefault

// Event posts a core/v1 Event on the node. eventType is corev1.EventTypeNormal or Warning.
func Event(ctx context.Context, client kubernetes.Interface, node *corev1.Node, component, eventType, reason, message string) error {
	suffix := make([]byte, 8)
	if _, err := rand.Read(suffix); err != nil {
		return err
	}
	now := metav1.NewTime(time.Now())
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Name:      node.Name + "." + hex.EncodeToString(suffix),
			Namespace: EventNamespace,
		},
		InvolvedObject: corev1.ObjectReference{
			Kind: "Node", Name: node.Name, UID: node.UID, APIVersion: "v1",
		},
		Reason:              reason,
		Message:             message,
		Type:                eventType,
		Source:              corev1.EventSource{Component: component, Host: node.Name},
		ReportingController: "gpupolicy.dev/" + component,
		ReportingInstance:   component + "-" + node.Name,
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
	}
	if _, err := client.CoreV1().Events(EventNamespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("post event %s on node %s: %w", reason, node.Name, err)
	}
	return nil
}

// NodeNameEnv is the downward-API variable that names the agent's node.
const NodeNameEnv = "NODE_NAME"

// ErrNoNodeName is returned when neither --node nor NODE_NAME names the node.
var ErrNoNodeName = errors.New("node name unknown: set env NODE_NAME from the downward API (fieldRef spec.nodeName) or pass --node")

// NewClient builds a clientset from kubeconfig, or from the in-cluster service account when
// kubeconfig is "". Requests are rate-limited modestly: one agent per node adds up.
func NewClient(kubeconfig string) (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		if kubeconfig == "" {
			return nil, fmt.Errorf("no Kubernetes credentials: not running in a pod (KUBERNETES_SERVICE_HOST unset) and no --kubeconfig given: %w", err)
		}
		return nil, fmt.Errorf("load --kubeconfig %s: %w", kubeconfig, err)
	}
	cfg.UserAgent = FieldManager
	cfg.QPS, cfg.Burst = 5, 10
	cfg.Timeout = 30 * time.Second
	return kubernetes.NewForConfig(cfg)
}
