package doctor

import (
	"fmt"
	"regexp"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"

	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// unscheduled walks the gates of a pod the scheduler has not placed, in the order a GPU pod
// meets them, narrowing the nodes at each step; the first step that leaves none is the answer.
func (s *snapshot) unscheduled(p *corev1.Pod, res string, need int64, rc *nodev1.RuntimeClass, events []corev1.Event) (string, Finding) {
	candidates := make([]*corev1.Node, 0, len(s.nodes))
	for i := range s.nodes {
		if n := &s.nodes[i]; need == 0 || s.free(n, res) >= need {
			candidates = append(candidates, n)
		}
	}
	if len(candidates) == 0 {
		return PodGateGPUResource, s.noGPUFinding(res, need)
	}

	if sel := runtimeClassSelector(rc); len(sel) > 0 {
		var matching, both []*corev1.Node
		for i := range s.nodes {
			if config.MatchesNodeSelector(s.nodes[i].Labels, sel) {
				matching = append(matching, &s.nodes[i])
			}
		}
		for _, n := range candidates {
			if config.MatchesNodeSelector(n.Labels, sel) {
				both = append(both, n)
			}
		}
		if len(both) == 0 {
			return PodGateRuntimeClassSelector, s.selectorFinding(rc, sel, res, need, matching, candidates)
		}
		candidates = both
	}

	var selected []*corev1.Node
	for _, n := range candidates {
		if podSelects(p, n) {
			selected = append(selected, n)
		}
	}
	if len(selected) == 0 {
		return PodGateNodeSelector, Finding{Severity: SeverityError, Check: PodGateNodeSelector,
			Message: fmt.Sprintf("the pod's %s excludes every node that passes the GPU gates (%s)", podSelectorString(p), nodeNames(candidates)),
			Fix:     "change the pod's nodeSelector/affinity to match one of " + nodeNames(candidates)}
	}

	var tolerated []*corev1.Node
	var firstTaint corev1.Taint
	for _, n := range selected {
		if t, bad := untoleratedTaint(p, n); bad {
			if firstTaint.Key == "" {
				firstTaint = t
			}
			continue
		}
		tolerated = append(tolerated, n)
	}
	if len(tolerated) == 0 {
		return PodGateTolerations, Finding{Severity: SeverityError, Check: PodGateTolerations,
			Message: fmt.Sprintf("every node that passes the GPU gates has a taint the pod does not tolerate: %s on %s", taintString(firstTaint), nodeNames(selected)),
			Fix:     "add the toleration " + tolerationFor(firstTaint) + " to the pod (or to the RuntimeClass's scheduling.tolerations)"}
	}

	var available []*corev1.Node
	for _, n := range tolerated {
		if nodeAvailable(n) {
			available = append(available, n)
		}
	}
	if len(available) == 0 {
		return PodGateNodeUnavailable, Finding{Severity: SeverityError, Check: PodGateNodeUnavailable,
			Message: fmt.Sprintf("the nodes that pass the GPU gates (%s) are NotReady or cordoned", nodeNames(tolerated)),
			Fix:     "kubectl describe node " + tolerated[0].Name + "; uncordon it (kubectl uncordon) once it is healthy"}
	}

	msg := fmt.Sprintf("these nodes pass every GPU gate (%d free %s, RuntimeClass, tolerations) yet the pod is not scheduled: %s", need, res, nodeNames(available))
	if e, ok := lastEvent(events, "FailedScheduling"); ok {
		msg += "; the scheduler said: " + oneLine(e.Message)
	}
	return PodGateScheduler, Finding{Severity: SeverityWarning, Check: PodGateScheduler, Message: msg,
		Fix: "the scheduler may not have retried since the gates opened; otherwise the constraint is not a GPU one (pod affinity, topology spread, volumes, other resources): kubectl describe pod " + p.Namespace + "/" + p.Name}
}

// free is what the scheduler can still give on n: allocatable minus what bound pods request.
func (s *snapshot) free(n *corev1.Node, res string) int64 {
	q := n.Status.Allocatable[corev1.ResourceName(res)]
	return q.Value() - s.inUse[n.Name][res]
}

// noGPUFinding explains the resource gate per GPU node and points the fix at the node whose
// broken or opted-out stage keeps its GPUs from being advertised, which is usually the real cause.
func (s *snapshot) noGPUFinding(res string, need int64) Finding {
	type nodeGPUs struct {
		r                  *NodeReport
		allocatable, inUse int64
	}
	var nodes []nodeGPUs
	var blocked *NodeReport
	var largest int64
	mig := strings.HasPrefix(res, migResourcePrefix)
	for i := range s.nodes {
		n := &s.nodes[i]
		r, ok := s.nodeReports[n.Name]
		if !ok || (!mig && r.GPUs.Resource != res) {
			continue // not a GPU node, or its pool serves another resource
		}
		g := nodeGPUs{r, quantity(n.Status.Allocatable, res), s.inUse[n.Name][res]}
		nodes = append(nodes, g)
		largest = max(largest, g.allocatable)
		if _, broken := gpuBlocker(r); broken && g.allocatable == 0 && blocked == nil {
			blocked = r
		}
	}
	f := Finding{Severity: SeverityError, Check: PodGateGPUResource,
		Message: fmt.Sprintf("no node has %d free %s", need, res)}
	if len(nodes) == 0 {
		f.Message += ": the cluster has no GPU node (none matches " + selectorString(s.exp.EntrySelector) + ")"
		f.Fix = "label the GPU nodes with the policy's entry selector: kubectl label node NODE " + selectorString(s.exp.EntrySelector)
		return f
	}
	// The node the fix points at gets its whole finding; the others only its name, so the
	// line stays readable on a large fleet (their details are in the NODES section).
	parts := make([]string, 0, len(nodes))
	for _, g := range nodes {
		r := g.r
		if g.allocatable > 0 {
			parts = append(parts, fmt.Sprintf("%s %d of %d free", r.Name, g.allocatable-g.inUse, g.allocatable))
			continue
		}
		why := r.Name + " advertises none"
		if e, ok := gpuBlocker(r); ok {
			detail := e.Check
			if r == blocked {
				detail += ": " + e.Message
			}
			why += " [" + detail + "]"
		}
		parts = append(parts, why)
	}
	f.Message += ": " + strings.Join(parts, "; ")
	switch {
	case blocked != nil:
		first, _ := gpuBlocker(blocked)
		f.Fix = "on " + blocked.Name + ": " + first.Fix
	case largest == 0 && mig && s.migProfileFix(strings.TrimPrefix(res, migResourcePrefix)) != "":
		f.Fix = s.migProfileFix(strings.TrimPrefix(res, migResourcePrefix))
	case largest == 0 && mig:
		f.Fix = fmt.Sprintf("no GPU node advertises the MIG profile %s: partition a node's GPUs into it (migStrategy mixed advertises one resource per profile), or ask for a profile a node has", strings.TrimPrefix(res, migResourcePrefix))
	case largest == 0:
		f.Fix = fmt.Sprintf("no GPU node advertises %s: ask for the policy's resource %s, or check the device plugin configuration", res, s.exp.ResourceName)
	case need > largest:
		f.Fix = fmt.Sprintf("the pod asks for %d %s but the largest node has %d: lower the request", need, res, largest)
	default:
		f.Fix = "every GPU is in use: wait for running pods to finish, lower the request, or add GPU nodes"
	}
	return f
}

// selectorFinding: the RuntimeClass keeps the pod off every node that has the GPUs it needs.
func (s *snapshot) selectorFinding(rc *nodev1.RuntimeClass, sel map[string]string, res string, need int64, matching, withGPUs []*corev1.Node) Finding {
	f := Finding{Severity: SeverityError, Check: PodGateRuntimeClassSelector}
	if len(matching) == 0 {
		f.Message = fmt.Sprintf("RuntimeClass %s only admits nodes with %s and no node has it", rc.Name, selectorString(sel))
	} else {
		f.Message = fmt.Sprintf("RuntimeClass %s admits %s, none with %d free %s; the nodes with free GPUs (%s) lack %s",
			rc.Name, nodeNames(matching), need, res, nodeNames(withGPUs), selectorString(sel))
	}
	if rc.Name != s.exp.RuntimeClassName {
		f.Fix = fmt.Sprintf("RuntimeClass %s is not the one the policy manages: use runtimeClassName: %s, whose selector follows the toolkit gate the node agent opens", rc.Name, s.exp.RuntimeClassName)
		return f
	}
	for _, n := range withGPUs {
		if r, ok := s.nodeReports[n.Name]; ok {
			if e, ok := firstError(r.Findings); ok {
				f.Fix = "on " + n.Name + ": " + e.Fix
				return f
			}
		}
	}
	f.Fix = fmt.Sprintf("the toolkit stage has not opened %s on %s: see the gpu-container-toolkit pod there", selectorString(sel), nodeNames(withGPUs))
	return f
}

// runtimeHandlerError matches the kubelet's sandbox errors when containerd lacks the handler:
// `no runtime for "nvidia" is configured`, `failed to get sandbox runtime: ...`, RuntimeHandler.
// Compiled on first use: every gpupolicy-fn process would pay it at start, the KRM call too.
var runtimeHandlerError = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(?i)no runtime for "[^"]*" is configured|runtime ?handler|failed to get sandbox runtime|unknown runtime handler`)
})

// scheduled judges a pod bound to a node: the kubelet's sandbox, device admission and container
// errors, in the order it meets them.
func (s *snapshot) scheduled(p *corev1.Pod, events []corev1.Event) (string, Finding) {
	node := p.Spec.NodeName
	onNode := fmt.Sprintf("kubectl -n %s get pods -o wide --field-selector spec.nodeName=%s", s.exp.Namespace, node)
	if e, ok := lastEvent(events, "FailedCreatePodSandBox"); ok && runtimeHandlerError().MatchString(e.Message) {
		f := Finding{Severity: SeverityError, Check: PodGateRuntimeHandler,
			Message: fmt.Sprintf("containerd on %s has no %q runtime handler: %s", node, s.exp.RuntimeClassName, oneLine(e.Message))}
		if r, ok := s.nodeReports[node]; ok && gateState(r.Gates, config.GateToolkitReady) != GateStateOpen {
			f.Fix = fmt.Sprintf("the RuntimeClass should not have admitted the pod to %s (its toolkit gate is closed): re-apply the rendered RuntimeClass, then delete the pod so it is rescheduled", node)
		} else {
			f.Fix = fmt.Sprintf("the toolkit gate on %s is open but containerd lost the handler (config replaced or containerd restarted without the drop-in): see the gpu-container-toolkit pod there (%s); it re-applies the drop-in; then delete the pod", node, onNode)
		}
		return PodGateRuntimeHandler, f
	}
	if e, ok := lastEvent(events, "UnexpectedAdmissionError"); ok {
		return PodGateDeviceAdmission, Finding{Severity: SeverityError, Check: PodGateDeviceAdmission,
			Message: fmt.Sprintf("the kubelet on %s could not allocate its GPUs: %s", node, oneLine(e.Message)),
			Fix:     fmt.Sprintf("see the gpu-device-plugin pod on %s (%s); delete the pod to retry once it is healthy", node, onNode)}
	}
	if cs, stuck := waitingContainer(p); stuck {
		f := Finding{Severity: SeverityError, Check: PodGateContainer,
			Message: fmt.Sprintf("container %s is %s: %s", cs.Name, cs.State.Waiting.Reason, oneLine(cs.State.Waiting.Message)),
			Fix:     fmt.Sprintf("kubectl -n %s describe pod %s and kubectl -n %[1]s logs %[2]s -c %s", p.Namespace, p.Name, cs.Name)}
		if strings.Contains(cs.State.Waiting.Message, "nvidia-container-cli") || strings.Contains(cs.State.Waiting.Message, "libnvidia-ml") {
			f.Fix = fmt.Sprintf("the NVIDIA runtime on %s cannot reach the driver: check the driver and toolkit stages there (gpupolicy-fn doctor --node %s)", node, node)
		}
		return PodGateContainer, f
	}
	if p.Status.Phase == corev1.PodRunning || p.Status.Phase == corev1.PodSucceeded {
		return PodGateNone, Finding{Check: "ok", Message: fmt.Sprintf("%s on %s: passed every GPU gate", strings.ToLower(string(p.Status.Phase)), node)}
	}
	msg := fmt.Sprintf("bound to %s, no error recorded yet", node)
	if len(events) > 0 {
		last := events[len(events)-1]
		msg += "; last warning " + last.Reason + ": " + oneLine(last.Message)
	}
	return PodGateNone, Finding{Severity: SeverityWarning, Check: "starting", Message: msg,
		Fix: fmt.Sprintf("kubectl -n %s describe pod %s", p.Namespace, p.Name)}
}

func firstError(fs []Finding) (Finding, bool) {
	for _, f := range fs {
		if f.Severity == SeverityError {
			return f, true
		}
	}
	return Finding{}, false
}

func nodeNames(nodes []*corev1.Node) string {
	names := make([]string, len(nodes))
	for i, n := range nodes {
		names[i] = n.Name
	}
	return strings.Join(names, ", ")
}
