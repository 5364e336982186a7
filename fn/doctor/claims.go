package doctor

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// Pod gates of the DRA path (allocation: dra): the pod asks for GPUs through ResourceClaims.
const (
	PodGateClaimMissing = "resourceclaim-missing"
	PodGateDeviceClass  = "deviceclass"
	PodGateNoDRADevices = "dra-devices"
	PodGateClaimDevices = "resourceclaim-devices"
)

// gpuClasses are the DeviceClasses the policy renders and the device type each selects.
var gpuClasses = map[string]string{"gpu.nvidia.com": config.DRATypeGPU, "mig.nvidia.com": config.DRATypeMIG}

// draView is what doctor reads of DRA, once, and only when some pod has ResourceClaims.
type draView struct {
	read    bool
	claims  map[string]*resourcev1.ResourceClaim // namespace/name
	slices  []resourcev1.ResourceSlice
	classes map[string]*resourcev1.DeviceClass // nil: the class does not exist
}

// readDRA loads claims and slices; a cluster that does not serve resource.k8s.io/v1 (older
// than 1.34) or RBAC that hides them leaves the DRA diagnosis out, with a note.
func (s *snapshot) readDRA(ctx context.Context) error {
	if s.dra.read {
		return nil
	}
	s.dra = draView{read: true, claims: map[string]*resourcev1.ResourceClaim{}, classes: map[string]*resourcev1.DeviceClass{}}
	claims, err := s.in.Cluster.ResourceClaims(ctx)
	if err != nil {
		s.dra.claims = nil
		return s.note(s.readErr("list", "resourceclaims.resource.k8s.io", "", "", err), "pods with ResourceClaims are judged without them")
	}
	for i := range claims {
		s.dra.claims[claims[i].Namespace+"/"+claims[i].Name] = &claims[i]
	}
	if s.dra.slices, err = s.in.Cluster.ResourceSlices(ctx); err != nil {
		s.dra.claims = nil
		return s.note(s.readErr("list", "resourceslices.resource.k8s.io", "", "", err), "pods with ResourceClaims are judged without them")
	}
	return nil
}

func (s *snapshot) deviceClass(ctx context.Context, name string) (*resourcev1.DeviceClass, bool, error) {
	if dc, ok := s.dra.classes[name]; ok {
		return dc, true, nil
	}
	dc, err := s.in.Cluster.DeviceClass(ctx, name)
	switch {
	case apierrors.IsNotFound(err):
		dc = nil
	case err != nil:
		return nil, false, s.note(s.readErr("get", "deviceclasses.resource.k8s.io", "", name, err), "its claims are not checked")
	}
	s.dra.classes[name] = dc
	return dc, true, nil
}

// podClaim is one claim a pod references; claim is nil when it does not exist (yet).
type podClaim struct {
	ref   string // namespace/name, or "template <name>" before the claim is made
	claim *resourcev1.ResourceClaim
}

func (s *snapshot) podClaims(p *corev1.Pod) []podClaim {
	generated := map[string]string{}
	for _, st := range p.Status.ResourceClaimStatuses {
		if st.ResourceClaimName != nil {
			generated[st.Name] = *st.ResourceClaimName
		}
	}
	var out []podClaim
	for _, rc := range p.Spec.ResourceClaims {
		name := ""
		switch {
		case rc.ResourceClaimName != nil:
			name = *rc.ResourceClaimName
		case generated[rc.Name] != "":
			name = generated[rc.Name]
		case rc.ResourceClaimTemplateName != nil:
			out = append(out, podClaim{ref: "template " + *rc.ResourceClaimTemplateName})
			continue
		}
		ref := p.Namespace + "/" + name
		out = append(out, podClaim{ref: ref, claim: s.dra.claims[ref]})
	}
	return out
}

// isGPUClaimPod: a pod whose claims ask for a class of the policy, or for a class that does
// not exist (a misspelt gpu.nvidia.com is a GPU pod that cannot start).
func (s *snapshot) isGPUClaimPod(ctx context.Context, p *corev1.Pod) bool {
	if len(p.Spec.ResourceClaims) == 0 || s.dra.claims == nil {
		return false
	}
	for _, pc := range s.podClaims(p) {
		if pc.claim == nil {
			continue
		}
		for _, class := range requestClasses(pc.claim) {
			if _, ours := gpuClasses[class]; ours {
				return true
			}
			if dc, known, err := s.deviceClass(ctx, class); err == nil && known && dc == nil {
				return true
			}
		}
	}
	return false
}

// requestClasses are the DeviceClasses a claim's requests (and their alternatives) name.
func requestClasses(c *resourcev1.ResourceClaim) []string {
	var out []string
	for _, r := range c.Spec.Devices.Requests {
		if r.Exactly != nil {
			out = append(out, r.Exactly.DeviceClassName)
		}
		for _, sr := range r.FirstAvailable {
			out = append(out, sr.DeviceClassName)
		}
	}
	return out
}

// claimFinding explains an unscheduled pod whose claims are not allocated: a claim that does
// not exist, a class that does not exist, no node publishing the devices of the class, every
// such device allocated to other claims, or (when the scheduler said it cannot allocate the
// claims) devices free but none satisfying the request's selectors. ok is false when the
// claims explain nothing (all allocated, or waiting for the scheduler).
func (s *snapshot) claimFinding(ctx context.Context, p *corev1.Pod, events []corev1.Event) (gate string, f Finding, ok bool) {
	if s.dra.claims == nil {
		return "", Finding{}, false
	}
	for _, pc := range s.podClaims(p) {
		if pc.claim == nil {
			if strings.HasPrefix(pc.ref, "template ") {
				continue // the ResourceClaim controller makes it; nothing to judge yet
			}
			return PodGateClaimMissing, Finding{Severity: SeverityError, Check: PodGateClaimMissing,
				Message: fmt.Sprintf("the pod references ResourceClaim %s, which does not exist", pc.ref),
				Fix:     "create the claim, or reference a ResourceClaimTemplate so one is made per pod"}, true
		}
		if pc.claim.Status.Allocation != nil {
			continue
		}
		for _, r := range pc.claim.Spec.Devices.Requests {
			if r.Exactly == nil {
				continue // prioritized alternatives: the scheduler's events say which failed
			}
			if gate, f, ok := s.requestFinding(ctx, p, pc, r.Name, r.Exactly, events); ok {
				return gate, f, true
			}
		}
	}
	return "", Finding{}, false
}

func (s *snapshot) requestFinding(ctx context.Context, p *corev1.Pod, pc podClaim, request string, req *resourcev1.ExactDeviceRequest, events []corev1.Event) (string, Finding, bool) {
	where := fmt.Sprintf("request %q of ResourceClaim %s", request, pc.ref)
	class := req.DeviceClassName
	dc, known, err := s.deviceClass(ctx, class)
	if err != nil || !known {
		return "", Finding{}, false
	}
	if dc == nil {
		return PodGateDeviceClass, Finding{Severity: SeverityError, Check: PodGateDeviceClass,
			Message: fmt.Sprintf("%s names DeviceClass %q, which does not exist", where, class),
			Fix:     "use deviceClassName gpu.nvidia.com (whole GPUs) or mig.nvidia.com (MIG devices), the classes the policy renders with allocation: dra"}, true
	}
	typ, ours := gpuClasses[class]
	if !ours {
		return "", Finding{}, false // another driver's class: not doctor's to judge
	}
	var all, candidates []deviceRef
	for _, sl := range s.dra.slices {
		if sl.Spec.Driver != config.DRADriverName {
			continue
		}
		for _, d := range sl.Spec.Devices {
			ref := deviceRef{pool: sl.Spec.Pool.Name, device: d}
			all = append(all, ref)
			if a, ok := d.Attributes["type"]; ok && a.StringValue != nil && *a.StringValue == typ {
				candidates = append(candidates, ref)
			}
		}
	}
	if len(all) == 0 {
		return PodGateNoDRADevices, Finding{Severity: SeverityError, Check: PodGateNoDRADevices,
			Message: fmt.Sprintf("%s needs devices of driver %s, and no node publishes ResourceSlices of it", where, config.DRADriverName),
			Fix:     "set allocation: dra on the GPU nodes' pool and check that gpu-dra-plugin runs there (its device-plugin gate must be open: gpupolicy-fn doctor --node NODE)"}, true
	}
	if len(candidates) == 0 {
		return PodGateNoDRADevices, Finding{Severity: SeverityError, Check: PodGateNoDRADevices,
			Message: fmt.Sprintf("%s asks for class %s (type %s), and the %d published devices of %s are all of another type", where, class, typ, len(all), config.DRADriverName),
			Fix:     map[string]string{config.DRATypeMIG: "declare a MIG layout for a DRA pool (nodePools[].mig), or ask for gpu.nvidia.com", config.DRATypeGPU: "ask for mig.nvidia.com, or give a pool whole GPUs (migEnabled: false)"}[typ]}, true
	}
	need := int64(1)
	if req.AllocationMode == resourcev1.DeviceAllocationModeExactCount && req.Count > 0 {
		need = req.Count
	}
	holders := s.allocatedTo(pc.claim)
	var free int64
	taken := map[string]bool{}
	for _, c := range candidates {
		if h, ok := holders[c.key()]; ok {
			taken[h] = true
		} else {
			free++
		}
	}
	switch {
	case int64(len(candidates)) < need:
		return PodGateClaimDevices, Finding{Severity: SeverityError, Check: PodGateClaimDevices,
			Message: fmt.Sprintf("%s asks for %d devices of class %s; the cluster publishes %d", where, need, class, len(candidates)),
			Fix:     "ask for fewer devices, or add GPU nodes on allocation: dra"}, true
	case free < need:
		return PodGateClaimDevices, Finding{Severity: SeverityError, Check: PodGateClaimDevices,
			Message: fmt.Sprintf("%s: %d of the %d devices of class %s are allocated to other claims (%s), %d free, %d needed", where,
				int64(len(candidates))-free, len(candidates), class, strings.Join(firstN(slices.Sorted(maps.Keys(taken)), 3), ", "), free, need),
			Fix: "wait for those claims' pods to finish (a claim is released when no pod reserves it), or add GPU nodes"}, true
	case len(req.Selectors) > 0 && cannotAllocate(p, events):
		var exprs []string
		for _, sel := range req.Selectors {
			if sel.CEL != nil {
				exprs = append(exprs, sel.CEL.Expression)
			}
		}
		return PodGateClaimDevices, Finding{Severity: SeverityError, Check: PodGateClaimDevices,
			Message: fmt.Sprintf("%s: no device of class %s satisfies its selector %s (the scheduler cannot allocate the claim; %d devices of the class are free: %s)",
				where, class, strings.Join(exprs, " && "), free, summarise(candidates)),
			Fix: "relax the selector to what the nodes publish (kubectl get resourceslices -o yaml), or add nodes whose GPUs satisfy it"}, true
	}
	return "", Finding{}, false
}

// cannotAllocate: the scheduler reported that no node can allocate the pod's claims.
func cannotAllocate(p *corev1.Pod, events []corev1.Event) bool {
	const msg = "cannot allocate all claims"
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && strings.Contains(c.Message, msg) {
			return true
		}
	}
	e, ok := lastEvent(events, "FailedScheduling")
	return ok && strings.Contains(e.Message, msg)
}

type deviceRef struct {
	pool   string
	device resourcev1.Device
}

func (d deviceRef) key() string { return d.pool + "/" + d.device.Name }

// allocatedTo maps each allocated device of the driver (pool/device) to the claim holding it,
// other than self.
func (s *snapshot) allocatedTo(self *resourcev1.ResourceClaim) map[string]string {
	out := map[string]string{}
	for ref, c := range s.dra.claims {
		if c.UID == self.UID || c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.Driver == config.DRADriverName {
				out[r.Pool+"/"+r.Device] = ref
			}
		}
	}
	return out
}

// summarise describes the candidates by what selectors usually test: memory and MIG profile.
func summarise(devs []deviceRef) string {
	count := map[string]int{}
	for _, d := range devs {
		var parts []string
		if a, ok := d.device.Attributes["productName"]; ok && a.StringValue != nil {
			parts = append(parts, *a.StringValue)
		}
		if a, ok := d.device.Attributes["profile"]; ok && a.StringValue != nil {
			parts = append(parts, "profile "+*a.StringValue)
		}
		if m, ok := d.device.Capacity["memory"]; ok {
			parts = append(parts, "memory "+m.Value.String())
		}
		count[cmp.Or(strings.Join(parts, ", "), d.device.Name)]++
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(count)) {
		out = append(out, fmt.Sprintf("%d× %s", count[k], k))
	}
	return strings.Join(out, "; ")
}

func firstN(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("and %d more", len(s)-n))
	}
	return s
}

// draResource is GPUState.Resource on a node the DRA plugin serves: its counts are the devices
// its ResourceSlices publish and those allocated to claims.
const draResource = "DRA " + config.DRADriverName

func (s *snapshot) draGPUState(n *corev1.Node) GPUState {
	g := GPUState{Resource: draResource, Found: -1, Replicas: 1}
	if v, err := strconv.Atoi(n.Labels[config.LabelGPUCount]); err == nil {
		g.Found = v
	}
	allocated := map[string]bool{}
	for _, c := range s.dra.claims {
		if c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.Driver == config.DRADriverName && r.Pool == n.Name {
				allocated[r.Device] = true
			}
		}
	}
	for _, sl := range s.dra.slices {
		if sl.Spec.Driver != config.DRADriverName || sl.Spec.NodeName == nil || *sl.Spec.NodeName != n.Name {
			continue
		}
		for _, d := range sl.Spec.Devices {
			g.Capacity++
			g.Allocatable++
			if allocated[d.Name] {
				g.InUse++
			}
		}
	}
	return g
}

// draNodeFindings: with the device-plugin gate open, the DRA plugin must publish the node's
// devices; fewer GPUs than the agent found means some are withdrawn (unhealthy).
func (s *snapshot) draNodeFindings(r *NodeReport, plugin, onNode string, add func(sev, check, msg, fix string)) {
	g := r.GPUs
	if s.dra.claims == nil || plugin != GateStateOpen {
		return
	}
	if g.Allocatable == 0 {
		add(SeverityError, "dra-devices", fmt.Sprintf("the device-plugin gate is open but no ResourceSlice of %s lists devices of this node (allocation: dra)", config.DRADriverName),
			fmt.Sprintf("see the gpu-dra-plugin pod on %s (%s): it has not published (its log says why: API errors, the ResourceSlice guardrails) or withdrew every GPU as unhealthy", r.Name, onNode))
	}
}
