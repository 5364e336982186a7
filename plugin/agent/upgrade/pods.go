package upgrade

import (
	"context"
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// podsOn lists the pods bound to node that have not finished. The field selector keeps the
// request small; the check of spec.nodeName is what confines every eviction to this node
// (admission sees only the Eviction, not the pod's node), so it never relies on the server.
func podsOn(ctx context.Context, client kubernetes.Interface, node string) ([]corev1.Pod, error) {
	l, err := client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
	if err != nil {
		return nil, fmt.Errorf("list pods on node %s: %w", node, err)
	}
	var out []corev1.Pod
	for _, p := range l.Items {
		if p.Spec.NodeName == node && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			out = append(out, p)
		}
	}
	return out, nil
}

// usesGPU reports whether a pod asks for a GPU: an extended resource under nvidia.com/ (the
// device plugin's nvidia.com/gpu, a pool's nvidia.com/gpu.shared, MIG's nvidia.com/mig-*).
func usesGPU(p *corev1.Pod) bool {
	for _, c := range append(append([]corev1.Container(nil), p.Spec.InitContainers...), p.Spec.Containers...) {
		for name := range c.Resources.Limits {
			if strings.HasPrefix(string(name), config.ManagedPrefix) {
				return true
			}
		}
		for name := range c.Resources.Requests {
			if strings.HasPrefix(string(name), config.ManagedPrefix) {
				return true
			}
		}
	}
	return false
}

// evictable says whether a drain may evict the pod: not a DaemonSet's (the controller would
// put it straight back, and the GPU stack's own pods are among them) and not a static pod.
func evictable(p *corev1.Pod) bool {
	if _, mirror := p.Annotations[corev1.MirrorPodAnnotationKey]; mirror {
		return false
	}
	for _, o := range p.OwnerReferences {
		if o.Kind == "DaemonSet" && o.Controller != nil && *o.Controller {
			return false
		}
	}
	return true
}

// selectPods picks the evictable pods for which keep is true.
func selectPods(pods []corev1.Pod, keep func(*corev1.Pod) bool) []corev1.Pod {
	var out []corev1.Pod
	for i := range pods {
		if evictable(&pods[i]) && keep(&pods[i]) {
			out = append(out, pods[i])
		}
	}
	return out
}

// matching is keep for a label selector.
func matching(sel labels.Selector) func(*corev1.Pod) bool {
	return func(p *corev1.Pod) bool { return sel.Matches(labels.Set(p.Labels)) }
}

// BlockedError is an eviction the API server refused because of a PodDisruptionBudget.
type BlockedError struct {
	Pod, Budget, Detail string
}

func (e *BlockedError) Error() string {
	if e.Budget == "" {
		return fmt.Sprintf("eviction of pod %s is refused: %s", e.Pod, e.Detail)
	}
	return fmt.Sprintf("eviction of pod %s is blocked by PodDisruptionBudget %s: %s", e.Pod, e.Budget, e.Detail)
}

// evict asks the Eviction API to remove the pod, so PodDisruptionBudgets decide. A 429 (a
// budget allows no disruption now) is a BlockedError naming the budget; a pod already gone
// is no error.
func evict(ctx context.Context, client kubernetes.Interface, p *corev1.Pod) error {
	err := client.PolicyV1().Evictions(p.Namespace).Evict(ctx, &policyv1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace},
		// The UID precondition: never evict a new pod that took the name meanwhile.
		DeleteOptions: &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &p.UID}},
	})
	switch {
	case err == nil, apierrors.IsNotFound(err):
		return nil
	case apierrors.IsTooManyRequests(err):
		return &BlockedError{Pod: p.Namespace + "/" + p.Name, Budget: budgetOf(err), Detail: detailOf(err)}
	}
	return fmt.Errorf("evict pod %s/%s: %w", p.Namespace, p.Name, err)
}

// budgetOf reads the PodDisruptionBudget's name from the API server's refusal: a cause of
// type DisruptionBudget, "The disruption budget NAME needs N healthy pods and has M currently".
func budgetOf(err error) string {
	var st apierrors.APIStatus
	if !errors.As(err, &st) || st.Status().Details == nil {
		return ""
	}
	for _, c := range st.Status().Details.Causes {
		if c.Type == policyv1.DisruptionBudgetCause {
			if rest, ok := strings.CutPrefix(c.Message, "The disruption budget "); ok {
				name, _, _ := strings.Cut(rest, " ")
				return name
			}
		}
	}
	return ""
}

func detailOf(err error) string {
	var st apierrors.APIStatus
	if errors.As(err, &st) && st.Status().Details != nil {
		for _, c := range st.Status().Details.Causes {
			if c.Type == policyv1.DisruptionBudgetCause {
				return c.Message
			}
		}
	}
	return err.Error()
}

func podNames(pods []corev1.Pod) string {
	names := make([]string, 0, len(pods))
	for _, p := range pods {
		names = append(names, p.Namespace+"/"+p.Name)
	}
	if len(names) > 5 {
		names = append(names[:5], fmt.Sprintf("and %d more", len(names)-5))
	}
	return strings.Join(names, ", ")
}
