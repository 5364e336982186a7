package doctor

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/fields"
)

// maxEvidence bounds the events quoted per pod: the newest say enough.
const maxEvidence = 3

func (s *snapshot) diagnosePods(ctx context.Context) error {
	if slices.ContainsFunc(s.pods, func(p corev1.Pod) bool { return len(p.Spec.ResourceClaims) > 0 }) {
		if err := s.readDRA(ctx); err != nil {
			return err
		}
	}
	if s.in.Pod != "" {
		ns, name, err := splitPodRef(s.in.Pod)
		if err != nil {
			return err
		}
		for i := range s.pods {
			if p := &s.pods[i]; p.Namespace == ns && p.Name == name {
				r, err := s.diagnosePod(ctx, p)
				if err != nil {
					return err
				}
				s.report.Pods = append(s.report.Pods, r)
				return nil
			}
		}
		return fmt.Errorf("--pod %s: no such pod in the cluster", s.in.Pod)
	}
	for i := range s.pods {
		p := &s.pods[i]
		if !(s.isGPUPod(p) || s.isGPUClaimPod(ctx, p)) || !needsDiagnosis(p) || (s.in.Node != "" && p.Spec.NodeName != s.in.Node) {
			continue
		}
		r, err := s.diagnosePod(ctx, p)
		if err != nil {
			return err
		}
		s.report.Pods = append(s.report.Pods, r)
	}
	return nil
}

func (s *snapshot) isGPUPod(p *corev1.Pod) bool {
	_, n := s.podGPUs(p)
	return n > 0 ||
		(p.Spec.RuntimeClassName != nil && *p.Spec.RuntimeClassName == s.exp.RuntimeClassName)
}

// needsDiagnosis: pending, failed, or a container that cannot start or keeps crashing.
func needsDiagnosis(p *corev1.Pod) bool {
	switch p.Status.Phase {
	case corev1.PodPending, corev1.PodFailed, "":
		return true
	case corev1.PodSucceeded:
		return false
	}
	_, stuck := waitingContainer(p)
	return stuck
}

// waitingContainer returns the first container stuck with an error reason.
func waitingContainer(p *corev1.Pod) (corev1.ContainerStatus, bool) {
	for _, cs := range append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		if w := cs.State.Waiting; w != nil && w.Reason != "" && w.Reason != "ContainerCreating" && w.Reason != "PodInitializing" {
			return cs, true
		}
	}
	return corev1.ContainerStatus{}, false
}

func (s *snapshot) diagnosePod(ctx context.Context, p *corev1.Pod) (PodReport, error) {
	r := PodReport{Namespace: p.Namespace, Name: p.Name, Phase: string(p.Status.Phase), Node: p.Spec.NodeName}
	r.Resource, r.GPUs = s.podGPUs(p)
	if p.Spec.RuntimeClassName != nil {
		r.RuntimeClassName = *p.Spec.RuntimeClassName
	}
	events, err := s.warningEvents(ctx, p)
	if err != nil {
		return r, err
	}
	for i := len(events) - 1; i >= 0 && len(r.Evidence) < maxEvidence; i-- {
		r.Evidence = append(r.Evidence, fmt.Sprintf("%s: %s", events[i].Reason, oneLine(events[i].Message)))
	}
	var rc *nodev1.RuntimeClass
	if r.RuntimeClassName != "" {
		var known bool
		if rc, known, err = s.lookupRuntimeClass(ctx, r.RuntimeClassName); err != nil {
			return r, err
		}
		if known && rc == nil {
			r.FailedGate = PodGateRuntimeClassMissing
			r.Finding = Finding{Severity: SeverityError, Check: PodGateRuntimeClassMissing,
				Message: fmt.Sprintf("the pod names RuntimeClass %q, which does not exist", r.RuntimeClassName),
				Fix:     fmt.Sprintf("apply the rendered RuntimeClass %q, or set runtimeClassName: %s (the policy's)", r.RuntimeClassName, s.exp.RuntimeClassName)}
			return r, nil
		}
	}
	if p.Spec.NodeName == "" && len(p.Spec.ResourceClaims) > 0 {
		if gate, f, ok := s.claimFinding(ctx, p, events); ok {
			r.FailedGate, r.Finding = gate, f
			return r, nil
		}
	}
	if p.Spec.NodeName == "" {
		r.FailedGate, r.Finding = s.unscheduled(p, r.Resource, r.GPUs, rc, events)
	} else {
		r.FailedGate, r.Finding = s.scheduled(p, events)
	}
	return r, nil
}

// lookupRuntimeClass returns the RuntimeClass by name; known is false when RBAC hid it.
func (s *snapshot) lookupRuntimeClass(ctx context.Context, name string) (*nodev1.RuntimeClass, bool, error) {
	if name == s.exp.RuntimeClassName {
		return s.runtimeClass, s.rcReadable, nil
	}
	if rc, ok := s.runtimeClasses[name]; ok {
		return rc, true, nil
	}
	rc, err := s.in.Cluster.RuntimeClass(ctx, name)
	switch {
	case apierrors.IsNotFound(err):
		rc = nil
	case err != nil:
		return nil, false, s.note(s.readErr("get", "runtimeclasses.node.k8s.io", "", name, err), "its selector is not checked")
	}
	if s.runtimeClasses == nil {
		s.runtimeClasses = map[string]*nodev1.RuntimeClass{}
	}
	s.runtimeClasses[name] = rc
	return rc, true, nil
}

// warningEvents are the pod's Warning events, oldest first.
func (s *snapshot) warningEvents(ctx context.Context, p *corev1.Pod) ([]corev1.Event, error) {
	sel := fields.Set{"involvedObject.kind": "Pod", "involvedObject.name": p.Name}.AsSelector().String()
	events, err := s.in.Cluster.Events(ctx, p.Namespace, sel)
	if err != nil {
		return nil, s.note(s.readErr("list", "events", p.Namespace, "", err), "pod "+p.Namespace+"/"+p.Name+" is judged without its events")
	}
	var out []corev1.Event
	for _, e := range events {
		io := e.InvolvedObject
		if e.Type == corev1.EventTypeWarning && io.Kind == "Pod" && io.Name == p.Name && (io.UID == "" || io.UID == p.UID) {
			out = append(out, e)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return eventTime(out[i]).Before(eventTime(out[j])) })
	return out, nil
}

func eventTime(e corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// lastEvent returns the newest event whose reason is one of reasons.
func lastEvent(events []corev1.Event, reasons ...string) (corev1.Event, bool) {
	for i := len(events) - 1; i >= 0; i-- {
		for _, r := range reasons {
			if events[i].Reason == r {
				return events[i], true
			}
		}
	}
	return corev1.Event{}, false
}
