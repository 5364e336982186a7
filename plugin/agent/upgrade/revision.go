package upgrade

import (
	"context"
	"errors"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
)

// errNoDaemonSet: the node's driver DaemonSet does not exist (yet).
var errNoDaemonSet = errors.New("driver DaemonSet not found")

// driverStage is what the step reads about its node's driver DaemonSet.
type driverStage struct {
	ds *appsv1.DaemonSet
	// current is the DaemonSet's newest ControllerRevision's hash (the label
	// controller-revision-hash its controller gives new pods); "" while it has none.
	current string
	// pod is the DaemonSet's pod on this node, nil when there is none.
	pod *corev1.Pod
}

// readStage reads the DaemonSet, its current revision and its pod on node. An OnDelete
// DaemonSet keeps old pods after a template change: a pod whose controller-revision-hash is
// not the newest revision's runs the old driver and needs the upgrade.
func readStage(ctx context.Context, client kubernetes.Interface, ns, name, node string) (*driverStage, error) {
	ds, err := client.AppsV1().DaemonSets(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%w: %s/%s", errNoDaemonSet, ns, name)
	}
	if err != nil {
		return nil, fmt.Errorf("get driver DaemonSet %s/%s: %w", ns, name, err)
	}
	sel, err := metav1.LabelSelectorAsSelector(ds.Spec.Selector)
	if err != nil {
		return nil, fmt.Errorf("driver DaemonSet %s/%s: selector: %w", ns, name, err)
	}
	st := &driverStage{ds: ds}
	revs, err := client.AppsV1().ControllerRevisions(ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return nil, fmt.Errorf("list revisions of DaemonSet %s/%s: %w", ns, name, err)
	}
	var newest *appsv1.ControllerRevision
	for i := range revs.Items {
		r := &revs.Items[i]
		if !metav1.IsControlledBy(r, ds) {
			continue
		}
		if newest == nil || r.Revision > newest.Revision {
			newest = r
		}
	}
	if newest != nil {
		st.current = newest.Labels[appsv1.DefaultDaemonSetUniqueLabelKey]
	}
	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel.String(),
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
	if err != nil {
		return nil, fmt.Errorf("list pods of DaemonSet %s/%s on node %s: %w", ns, name, node, err)
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Spec.NodeName != node || !metav1.IsControlledBy(p, ds) {
			continue
		}
		// A terminating pod is the old one leaving; the new one is what the node will run.
		if st.pod == nil || st.pod.DeletionTimestamp != nil {
			st.pod = p
		}
	}
	return st, nil
}

// hash is the revision a pod runs.
func hash(p *corev1.Pod) string {
	if p == nil {
		return ""
	}
	return p.Labels[appsv1.DefaultDaemonSetUniqueLabelKey]
}

// outdated reports whether the node's driver pod runs an older revision than the DaemonSet's.
func (st *driverStage) outdated() bool {
	return st.pod != nil && st.current != "" && hash(st.pod) != st.current
}

func ready(p *corev1.Pod) bool {
	if p == nil || p.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
