package doctor

import (
	"cmp"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// migResourcePrefix names the resources of MIG slices under migStrategy mixed
// (nvidia.com/mig-1g.5gb, ...), advertised instead of nvidia.com/gpu.
const migResourcePrefix = "nvidia.com/mig-"

// stageVerdict is one entry of the agent's gate-status annotation.
type stageVerdict struct {
	Ready  bool   `json:"ready"`
	Reason string `json:"reason"`
}

// diagnoseNodes judges every GPU node (pod diagnoses point at them) and reports those the
// flags ask for: all of them, --node's, or none with --pod alone.
func (s *snapshot) diagnoseNodes() error {
	s.nodeReports = map[string]*NodeReport{}
	found := false
	for i := range s.nodes {
		n := &s.nodes[i]
		named := n.Name == s.in.Node
		found = found || named
		if !s.isGPUNode(n) && !named {
			continue
		}
		r := s.diagnoseNode(n)
		s.nodeReports[n.Name] = &r
		if named || (s.in.Node == "" && s.in.Pod == "") {
			s.report.Nodes = append(s.report.Nodes, r)
		}
	}
	if s.in.Node != "" && !found {
		return fmt.Errorf("--node %s: no such node in the cluster", s.in.Node)
	}
	if len(s.nodeReports) == 0 && s.in.Node == "" && s.in.Pod == "" {
		s.report.Cluster = append(s.report.Cluster, s.noGPUNodes())
	}
	return nil
}

// noGPUNodes: nothing matches the entry selector, so no stage runs anywhere. With the default
// selector that is nvidia.com/gpu.present, which spec.discovery says who sets.
func (s *snapshot) noGPUNodes() Finding {
	sel := selectorString(s.exp.EntrySelector)
	fix := "label the GPU nodes: kubectl label node NODE " + sel
	if _, ok := s.exp.EntrySelector[config.LabelGPUPresent]; ok {
		fix = fmt.Sprintf("%s is set by spec.discovery: with builtin (the default) the gpu-discovery pods set it on nodes with an NVIDIA GPU on the PCI bus (kubectl -n %s logs ds/gpu-discovery); with nfd, Node Feature Discovery's NodeFeatureRule; with none, a person: kubectl label node NODE %s",
			config.LabelGPUPresent, s.exp.Namespace, sel)
	}
	return Finding{
		Severity: SeverityWarning, Check: "no-gpu-nodes",
		Message: fmt.Sprintf("no node matches the entry selector %s: no stage of the GPU stack runs on any node", sel),
		Fix:     fix,
	}
}

func (s *snapshot) diagnoseNode(n *corev1.Node) NodeReport {
	r := NodeReport{Name: n.Name, Unschedulable: n.Spec.Unschedulable}
	for _, c := range n.Status.Conditions {
		switch c.Type {
		case corev1.NodeReady:
			r.KubeletReady = c.Status == corev1.ConditionTrue
		case config.ConditionGPUStackReady:
			r.StackCondition = &StackCondition{Status: string(c.Status), Reason: c.Reason, Message: c.Message}
		}
	}
	verdicts, verdictErr := parseGateStatus(n.Annotations[config.AnnotationGateStatus])
	r.Gates = s.gates(n, verdicts)
	r.Driver = s.driverState(n)
	r.GPUs = s.gpuState(n)
	r.RuntimeClass = s.runtimeClassFit(n)

	add := func(sev, check, msg, fix string) {
		r.Findings = append(r.Findings, Finding{Severity: sev, Check: check, Message: msg, Fix: fix})
	}
	onNode := fmt.Sprintf("kubectl -n %s get pods -o wide --field-selector spec.nodeName=%s", s.exp.Namespace, n.Name)
	for _, g := range r.Gates {
		if g.State == GateStateOptedOut {
			r.Findings = append(r.Findings, optOutFinding(n.Name, g))
		}
	}
	operator := operatorNodeFinding(n, onNode)
	if operator.Check != "" {
		// First: while the operator manages the node its gates are the operator's, and the
		// agent's verdicts (none written) explain nothing.
		r.Findings = append(r.Findings, operator)
	}
	if !r.KubeletReady {
		add(SeverityError, "node-not-ready", "the kubelet is not Ready", "kubectl describe node "+n.Name+" (conditions and events), then the kubelet's logs on the node")
	}
	if verdictErr != nil {
		add(SeverityWarning, "gate-status", fmt.Sprintf("annotation %s is not the agent's JSON: %v", config.AnnotationGateStatus, verdictErr),
			"the agent rewrites it on its next pass; check that only gpu-node-agent writes nvidia.com/ annotations")
	}
	if r.Driver.ModulesDrift() {
		add(SeverityError, "driver-kernel-modules", fmt.Sprintf("the %s kernel module is loaded, the policy asks for %s (driver.kernelModuleType)", r.Driver.KernelModules, r.Driver.WantModules),
			fmt.Sprintf("load NVIDIA's %s kernel modules on %s (the driver container does with KERNEL_MODULE_TYPE; a preinstalled driver needs a node image with them), or set driver.kernelModuleType (the node pool's, or spec.driver's) to auto", r.Driver.WantModules, n.Name))
	}
	if r.Driver.Drift && !(r.Driver.ModulesDrift() && driverSatisfies(r.Driver.Version, r.Driver.Expected, r.Driver.Enforce)) {
		sev := SeverityError
		if r.Driver.Enforce == "none" {
			sev = SeverityWarning // the agent opens the gates anyway
		}
		msg := fmt.Sprintf("driver %s does not match the policy's %s (enforce %s)", orUnknown(r.Driver.Version), orUnknown(r.Driver.Expected), orUnknown(r.Driver.Enforce))
		add(sev, "driver-drift", msg, fmt.Sprintf("install driver %s on %s (drain it first), or, if %s is intended, set spec.driver.version and re-render",
			orUnknown(r.Driver.Expected), n.Name, orUnknown(r.Driver.Version)))
	}
	if f, ok := upgradeFinding(n); ok {
		// First: a node mid-upgrade is cordoned and its driver gone for a while on purpose.
		r.Findings = append(r.Findings, f)
	}
	if f, ok := migFinding(n); ok {
		// Before the gate finding: the MIG step is why the downstream gates are closed.
		r.Findings = append(r.Findings, f)
	}
	if g, ok := firstClosed(r.Gates); ok && operator.Check != "gpu-operator" {
		add(SeverityError, "gate", fmt.Sprintf("%s is closed%s", g.Label, reasonSuffix(g.Reason)), s.gateFix(g, n, onNode))
	}
	s.gpuFindings(&r, onNode, add)
	s.runtimeClassFindings(&r, add)

	r.Verdict = "ready"
	for _, f := range r.Findings {
		if f.Severity == SeverityError {
			r.Verdict = f.Check + ": " + f.Message
			break
		}
	}
	return r
}

// optOutFinding is a person's "false" on a gate: a warning on the node (the choice is theirs),
// and the fix undoes it.
func optOutFinding(node string, g Gate) Finding {
	return Finding{Severity: SeverityWarning, Check: "opt-out",
		Message: fmt.Sprintf("gate %s is \"false\": a person opted %s out of the %s stage; the agent never reopens it", g.Label, node, g.Stage),
		Fix:     fmt.Sprintf("if the opt-out is no longer wanted: kubectl label node %s %s-", node, g.Label)}
}

// gpuBlocker is why a node advertises no GPUs to a pod that needs them: its first error, else
// an opt-out of the device plugin or of a stage before it. The opt-out is only a warning for
// the node, but for the pod it is the answer: nothing on that node will advertise its GPUs.
func gpuBlocker(r *NodeReport) (Finding, bool) {
	if f, ok := firstError(r.Findings); ok {
		return f, true
	}
	for _, g := range r.Gates {
		if g.State == GateStateOptedOut {
			return optOutFinding(r.Name, g), true
		}
		if g.Stage == config.StageDevicePlugin {
			break
		}
	}
	return Finding{}, false
}

func parseGateStatus(raw string) (map[string]stageVerdict, error) {
	v := map[string]stageVerdict{}
	if raw == "" {
		return v, nil
	}
	err := json.Unmarshal([]byte(raw), &v)
	return v, err
}

func (s *snapshot) gates(n *corev1.Node, verdicts map[string]stageVerdict) []Gate {
	var out []Gate
	stages := s.exp.stages()
	for _, d := range config.Gates {
		g := Gate{Stage: d.Name, Label: d.Label}
		switch v, ok := n.Labels[d.Label]; {
		case !d.Enabled(stages):
			g.State = GateStateDisabled
		case v == config.GateOpen:
			g.State = GateStateOpen
		case ok && v == config.GateOptOut:
			g.State = GateStateOptedOut
		default:
			g.State = GateStateClosed
		}
		if g.State == GateStateClosed {
			g.blockedBy, g.Reason = closedReason(d, stages, verdicts)
		}
		out = append(out, g)
	}
	return out
}

// closedReason is the check that keeps a gate closed and the agent's verdict: the first failed
// check up to the one that opens the gate under the policy's stages (a label is open iff the
// check that opens it and every enabled check before it is ready); without a recorded failure,
// the opening check and no reason. The entry gate has neither.
func closedReason(d config.Gate, stages config.Stages, verdicts map[string]stageVerdict) (check, reason string) {
	opener := d.Opener(stages)
	if opener == "" {
		return "", "" // opened on entry; a closed entry gate means no agent wrote the node
	}
	for _, stage := range config.EnabledChecks(stages) {
		if v, ok := verdicts[stage]; ok && !v.Ready {
			return stage, stage + ": " + v.Reason
		}
		if stage == opener {
			break
		}
	}
	return opener, ""
}

// firstClosed is the first gate the agent still has to open; an opt-out upstream explains the
// rest, so nothing after it is reported as closed.
func firstClosed(gates []Gate) (Gate, bool) {
	for _, g := range gates {
		switch g.State {
		case GateStateOptedOut:
			return Gate{}, false
		case GateStateClosed:
			return g, true
		}
	}
	return Gate{}, false
}

// gateFix is the stage table's fix of the check that keeps g closed (config.Gates), or its
// entry fix.
func (s *snapshot) gateFix(g Gate, n *corev1.Node, onNode string) string {
	vars := map[string]string{"node": n.Name, "onNode": onNode, "entry": selectorString(s.exp.EntrySelector),
		"runtimeClass": s.exp.RuntimeClassName, "statusFile": config.ToolkitStatusFile}
	if row, ok := config.GateByName(g.blockedBy); ok {
		return config.FixFor(row.Fix, vars)
	}
	return config.FixFor(config.EntryFix, vars)
}

func reasonSuffix(reason string) string {
	if reason == "" {
		return " (the agent recorded no reason)"
	}
	return " (agent: " + reason + ")"
}

func orUnknown(s string) string { return cmp.Or(s, "unknown") }

func (s *snapshot) driverState(n *corev1.Node) DriverState {
	want, enforce := s.exp.driverFor(n.Labels)
	d := DriverState{
		Version:  n.Labels[config.LabelDriverVersion],
		Expected: want,
		Enforce:  enforce,
		Drift:    n.Labels[config.LabelDriverDrift] == "true",
		Detail:   n.Annotations[config.AnnotationDriverDrift],

		KernelModules: n.Labels[config.LabelDriverKernelModules],
		WantModules:   s.exp.modulesFor(n.Labels),
	}
	if d.Version != "" && d.Expected != "" && !driverSatisfies(d.Version, d.Expected, d.Enforce) {
		d.Drift = true
	}
	return d
}

// driverSatisfies applies the policy's enforce rule as the agent does (plugin/config's, numeric:
// 580.95.5 is 580.95.05): exact version, same branch (the major number, e.g. 580); under none
// any other version is drift, reported as a warning only.
func driverSatisfies(found, want, enforce string) bool {
	f, errF := config.ParseDriverVersion(found)
	w, errW := config.ParseDriverVersion(want)
	if errF != nil || errW != nil {
		return found == want
	}
	if enforce == config.DriverEnforceNone {
		return f.Equal(w)
	}
	ok, err := config.DriverSatisfies(enforce, w, f)
	return err == nil && ok
}

func (s *snapshot) gpuState(n *corev1.Node) GPUState {
	if s.exp.draFor(n.Labels) {
		return s.draGPUState(n)
	}
	res := s.exp.resourceFor(n.Labels)
	g := GPUState{Resource: res, Found: -1, Replicas: 1, InUse: s.inUse[n.Name][res]}
	if v, err := strconv.Atoi(n.Labels[config.LabelGPUCount]); err == nil {
		g.Found = v
	}
	if v, err := strconv.Atoi(n.Labels[config.LabelGPUReplicas]); err == nil && v > 0 {
		g.Replicas = v
	}
	g.Capacity = quantity(n.Status.Capacity, res)
	g.Allocatable = quantity(n.Status.Allocatable, res)
	for name, q := range n.Status.Capacity {
		if strings.HasPrefix(string(name), migResourcePrefix) {
			g.MIGCapacity += q.Value()
			g.MIGAllocatable += quantity(n.Status.Allocatable, string(name))
		}
	}
	return g
}

func (s *snapshot) gpuFindings(r *NodeReport, onNode string, add func(sev, check, msg, fix string)) {
	plugin := gateState(r.Gates, config.StageDevicePlugin)
	if r.GPUs.Resource == draResource {
		s.draNodeFindings(r, plugin, onNode, add)
		return
	}
	g := r.GPUs
	res := g.Resource
	switch {
	case plugin == GateStateOpen && g.Allocatable == 0 && g.MIGAllocatable == 0:
		add(SeverityError, "gpu-capacity", fmt.Sprintf("the device-plugin gate is open but the kubelet advertises no allocatable %s (capacity %d)", res, g.Capacity),
			fmt.Sprintf("see the gpu-device-plugin pod on %s (%s): it has not registered with the kubelet, or reports every GPU unhealthy", r.Name, onNode))
	case plugin == GateStateOpen && g.Allocatable+g.MIGAllocatable < g.Capacity+g.MIGCapacity:
		what := res
		if g.MIGCapacity > 0 {
			what += " and MIG devices"
		}
		capacity, allocatable := g.Capacity+g.MIGCapacity, g.Allocatable+g.MIGAllocatable
		add(SeverityWarning, "gpu-capacity", fmt.Sprintf("%d of %d %s are unhealthy (capacity %d, allocatable %d)", capacity-allocatable, capacity, what, capacity, allocatable),
			fmt.Sprintf("the device plugin marked GPUs unhealthy after XID errors: kubectl describe node %s; they return after the recovery period, else drain the node and reset the GPU", r.Name))
	}
	// MIG slices do not map to whole GPUs, so the count check only holds without them.
	if g.Found >= 0 && g.Capacity > 0 && g.MIGCapacity == 0 && int64(g.Found*g.Replicas) != g.Capacity {
		add(SeverityWarning, "gpu-count", fmt.Sprintf("the agent found %d GPUs (%s) × %d replicas, but the kubelet capacity of %s is %d", g.Found, config.LabelGPUCount, g.Replicas, res, g.Capacity),
			fmt.Sprintf("a GPU fell off the bus or the device plugin config differs from the policy: compare nvidia-smi on %s with the gpu-device-plugin ConfigMap", r.Name))
	}
}

func gateState(gates []Gate, stage string) string {
	for _, g := range gates {
		if g.Stage == stage {
			return g.State
		}
	}
	return ""
}

func (s *snapshot) runtimeClassFit(n *corev1.Node) RuntimeClassFit {
	f := RuntimeClassFit{Name: s.exp.RuntimeClassName}
	if s.runtimeClass == nil {
		return f
	}
	f.Known = true
	sel := runtimeClassSelector(s.runtimeClass)
	f.Selector = selectorString(sel)
	f.Matches = len(sel) == 0 || config.MatchesNodeSelector(n.Labels, sel)
	return f
}

func (s *snapshot) runtimeClassFindings(r *NodeReport, add func(sev, check, msg, fix string)) {
	rc := r.RuntimeClass
	if !rc.Known {
		return
	}
	ready := gateState(r.Gates, config.GateToolkitReady) == GateStateOpen
	switch {
	case ready && !rc.Matches:
		add(SeverityError, "runtimeclass", fmt.Sprintf("RuntimeClass %s selects %s, which does not match %s although its toolkit gate is open", rc.Name, rc.Selector, r.Name),
			fmt.Sprintf("re-apply the rendered RuntimeClass (its scheduling.nodeSelector must be %s=true): kubectl get runtimeclass %s -o yaml", config.LabelToolkitReady, rc.Name))
	case !ready && rc.Matches:
		add(SeverityError, "runtimeclass", fmt.Sprintf("RuntimeClass %s admits pods to %s although containerd there has no verified handler (%s)", rc.Name, r.Name, selectorPhrase(rc.Selector)),
			fmt.Sprintf("re-apply the rendered RuntimeClass so it selects %s=true; pods landing here fail with RuntimeHandler errors", config.LabelToolkitReady))
	}
}

func selectorPhrase(sel string) string {
	if sel == "" {
		return "it has no scheduling.nodeSelector"
	}
	return "its selector is " + sel
}
