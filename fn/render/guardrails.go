package render

import (
	"fmt"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"

	"github.com/gpupolicy/gpupolicy/fn/validate/matrix"

	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// nodeNameClaim is the extra the API server puts in a bound service account token's user info
// when the pod's token is bound to a node (GA since Kubernetes 1.32): the node the pod runs on.
const nodeNameClaim = "authentication.kubernetes.io/node-name"

// renderGuardrails confines the service accounts that may patch nodes (RBAC cannot say "only
// this label prefix" or "only your own node"): every node request they make must be an
// update of the node their pod runs on that changes no spec (taints, unschedulable, podCIDR),
// no label or annotation outside nvidia.com/, and of the status nothing but the node agent's
// own condition (config.ConditionGPUStackReady); gpu-discovery may only add
// nvidia.com/gpu.present=true.
//
// The rules hold for both the node and its nodes/status subresource: the API server runs
// admission on the whole object after the subresource's strategy reset what that request may
// not change (a node update keeps the old status, a status update keeps the old spec), so
// object and oldObject are whole Nodes either way.
func renderGuardrails(c *plan) (Objects, error) {
	if !c.guardrails() {
		return nil, nil
	}
	fail := admissionv1.Fail
	users := make([]string, 0, 3)
	for _, r := range c.roles() {
		if r.serviceAccount == NameDRAPlugin {
			continue // writes no node; renderDRAGuardrails confines its ResourceSlices
		}
		users = append(users, celString(c.serviceAccountUser(r.serviceAccount)))
	}
	claim := fmt.Sprintf("request.userInfo.extra[%s]", celString(nodeNameClaim))
	prefix := celString(config.ManagedPrefix)
	agent := celString(c.serviceAccountUser(NameNodeAgent))
	statusFields, err := c.nodeStatusFields()
	if err != nil {
		return nil, err
	}
	policy := &admissionv1.ValidatingAdmissionPolicy{
		TypeMeta:   typeMeta("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"),
		ObjectMeta: c.meta(NameGuardrails, false),
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionv1.MatchResources{
				ResourceRules: []admissionv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionv1.RuleWithOperations{
						Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update, admissionv1.Delete},
						Rule: admissionv1.Rule{
							APIGroups: []string{""}, APIVersions: []string{"v1"},
							Resources: []string{"nodes", "nodes/status"},
						},
					},
				}},
			},
			MatchConditions: []admissionv1.MatchCondition{{
				Name:       "gpupolicy-node-writers",
				Expression: fmt.Sprintf("request.userInfo.username in [%s]", strings.Join(users, ", ")),
			}},
			Validations: append([]admissionv1.Validation{
				{
					Expression: "request.operation == 'UPDATE' && (!has(request.subResource) || request.subResource == '' || (request.subResource == 'status' && request.userInfo.username == " + agent + "))",
					Message:    "the GPU node agents may only update nodes (not create or delete them); only the node agent may update a node's status",
				},
				{
					Expression: fmt.Sprintf("request.operation != 'UPDATE' || (has(request.userInfo.extra) && %s in request.userInfo.extra && size(%s) > 0 && %s[0] == object.metadata.name)",
						celString(nodeNameClaim), claim, claim),
					Message: "the GPU node agents may only change the node their pod runs on (service account token claim " + nodeNameClaim + ")",
				},
				c.nodeSpecValidation(agent),
				{
					Expression: "request.operation != 'UPDATE' || (" + unchangedOutside("labels", prefix) + ")",
					Message:    "the GPU node agents may only change labels whose key starts with " + config.ManagedPrefix,
				},
				{
					Expression: "request.operation != 'UPDATE' || (" + unchangedUnless("labels", "k != "+celString(config.LabelMIGConfig)) + ")",
					Message:    "the GPU node agents may not change the label " + config.LabelMIGConfig + ": a node's MIG layout is a person's choice (the agent reports " + config.LabelMIGConfigState + ")",
				},
				{
					Expression: "request.operation != 'UPDATE' || (" + unchangedOutside("annotations", prefix) + ")",
					Message:    "the GPU node agents may only change annotations whose key starts with " + config.ManagedPrefix,
				},
				{
					Expression: "request.operation != 'UPDATE' || " + otherConditions("object") + " == " + otherConditions("oldObject"),
					Message:    "the GPU node agents may only add, change or remove the node condition " + config.ConditionGPUStackReady + " (not the kubelet's or another controller's)",
				},
				{
					Expression: "request.operation != 'UPDATE' || (" + unchangedStatus(statusFields) + ")",
					Message:    "the GPU node agents may not change a node's status besides the " + config.ConditionGPUStackReady + " condition (capacity, allocatable, addresses, nodeInfo, ...)",
				},
			}, c.discoveryValidations()...),
		},
	}
	out := c.denyingPolicy(policy)
	if c.upgrades() {
		out = append(out, c.podGuardrails(agent, claim)...)
	}
	return out, nil
}

// denyingPolicy is the guardrails' policy with the binding that enforces it (Deny), both in
// prereqs.
func (c *plan) denyingPolicy(policy *admissionv1.ValidatingAdmissionPolicy) Objects {
	binding := &admissionv1.ValidatingAdmissionPolicyBinding{
		TypeMeta:   typeMeta("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding"),
		ObjectMeta: c.meta(policy.Name, false),
		Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        policy.Name,
			ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
		},
	}
	return Objects{
		{Stage: StagePrereqs, Component: "guardrails", Obj: policy},
		{Stage: StagePrereqs, Component: "guardrails", Obj: binding},
	}
}

// NamePodGuardrails confines the pod deletes of the node agent's upgrade step.
const NamePodGuardrails = "gpupolicy-driver-pod-guardrails"

// podGuardrails let the node agent delete only a driver-stage pod (gpu-driver, gpu-driver-<pool>)
// of its own namespace on its own node: the one whose replacement brings the new driver. Its
// evictions go through the Eviction API, whose admission request names the pod but not its
// node; the upgrade step evicts only pods bound to its node.
func (c *plan) podGuardrails(agent, claim string) Objects {
	fail := admissionv1.Fail
	name := celString(LabelName)
	policy := &admissionv1.ValidatingAdmissionPolicy{
		TypeMeta:   typeMeta("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"),
		ObjectMeta: c.meta(NamePodGuardrails, false),
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionv1.MatchResources{
				ResourceRules: []admissionv1.NamedRuleWithOperations{{
					RuleWithOperations: admissionv1.RuleWithOperations{
						Operations: []admissionv1.OperationType{admissionv1.Delete},
						Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
					},
				}},
			},
			MatchConditions: []admissionv1.MatchCondition{{
				Name:       "gpupolicy-node-agent",
				Expression: "request.userInfo.username == " + agent,
			}},
			Validations: []admissionv1.Validation{{
				Expression: fmt.Sprintf("has(request.userInfo.extra) && %s in request.userInfo.extra && size(%s) > 0 && oldObject.spec.?nodeName.orValue('') == %s[0]",
					celString(nodeNameClaim), claim, claim),
				Message: "the GPU node agent may only delete pods on the node its pod runs on (service account token claim " + nodeNameClaim + ")",
			}, {
				Expression: fmt.Sprintf("oldObject.metadata.namespace == %s && has(oldObject.metadata.labels) && %s in oldObject.metadata.labels && (oldObject.metadata.labels[%s] == %s || oldObject.metadata.labels[%s].startsWith(%s))",
					celString(c.ns), name, name, celString(NameDriver), name, celString(NameDriver+"-")),
				Message: "the GPU node agent may only delete its driver pod (DaemonSet " + NameDriver + " or " + NameDriver + "-<pool> in namespace " + c.ns + "), so the OnDelete DaemonSet starts the new driver",
			}},
		},
	}
	return c.denyingPolicy(policy)
}

// nodeSpecValidation keeps a node's spec as it is, except what the node agent's upgrade step
// needs on its own node (the rules above confine every write to it): cordon and uncordon
// (spec.unschedulable) while its driver is replaced, and the driver-drift NoSchedule taint
// under onDrift: taint. Every other field and every other taint must stay.
func (c *plan) nodeSpecValidation(agent string) admissionv1.Validation {
	if !c.upgrades() {
		return admissionv1.Validation{
			Expression: "request.operation != 'UPDATE' || object.spec == oldObject.spec",
			Message:    "the GPU node agents may not change a node's spec (taints, unschedulable, podCIDR)",
		}
	}
	taint := celString(config.TaintDriverDrift)
	others := func(side string) string {
		return fmt.Sprintf("%s.spec.?taints.orValue([]).filter(t, t.key != %s)", side, taint)
	}
	var same []string
	kube, _ := matrix.ParseVersion(c.p.Spec.KubernetesVersion) // checked by nodeStatusFields
	for _, f := range nodeSpecFields {
		if f.since == "" || kube.Compare(matrix.MustParse(f.since)) >= 0 {
			same = append(same, fmt.Sprintf("object.spec.?%[1]s == oldObject.spec.?%[1]s", f.name))
		}
	}
	return admissionv1.Validation{
		Expression: "request.operation != 'UPDATE' || object.spec == oldObject.spec || (request.userInfo.username == " + agent + " && " +
			strings.Join(same, " && ") + " && " + others("object") + " == " + others("oldObject") +
			fmt.Sprintf(" && object.spec.?taints.orValue([]).all(t, t.key != %s || (t.effect == 'NoSchedule' && !has(t.value)))", taint) + ")",
		Message: "the GPU node agents may not change a node's spec (taints, podCIDR, ...); only the node agent may cordon or uncordon its own node (spec.unschedulable) and put or remove the taint " + config.TaintDriverDrift + ":NoSchedule",
	}
}

// nodeSpecFields are core/v1 NodeSpec's fields besides unschedulable and taints (the upgrade
// step's), each with the Kubernetes minor whose Node schema has it, as nodeStatusFields; a
// unit test keeps the list complete against k8s.io/api.
var nodeSpecFields = []struct{ name, since string }{
	{"podCIDR", ""}, {"podCIDRs", ""}, {"providerID", ""}, {"configSource", ""}, {"externalID", ""},
	{"podPreemptionPolicy", "1.37"},
}

// discoveryValidations narrow the discovery program further than the node agents: on top of
// the rules above, it may only add nvidia.com/gpu.present=true where the label is absent
// (never change a person's value, never remove it) and touch no other label or annotation.
func (c *plan) discoveryValidations() []admissionv1.Validation {
	if !c.builtinDiscovery() {
		return nil
	}
	notDiscovery := "request.operation != 'UPDATE' || request.userInfo.username != " + celString(c.serviceAccountUser(NameDiscovery)) + " || "
	key := celString(config.LabelGPUPresent)
	has := func(o string) string {
		return fmt.Sprintf("(has(%[1]s.metadata.labels) && %[2]s in %[1]s.metadata.labels)", o, key)
	}
	added := fmt.Sprintf("(!%s && %s && object.metadata.labels[%s] == 'true')", has("oldObject"), has("object"), key)
	return []admissionv1.Validation{
		{
			Expression: notDiscovery + "(" + unchangedUnless("labels", "k == "+key) + ") && ((" + unchangedUnless("labels", "false") + ") || " + added + ")",
			Message:    "GPU discovery may only add the label " + config.LabelGPUPresent + "=true where it is absent: no other label, and never change or remove a value that is set",
		},
		{
			Expression: notDiscovery + "(" + unchangedUnless("annotations", "false") + ")",
			Message:    "GPU discovery may not change node annotations",
		},
	}
}

// unchangedOutside is CEL that holds when no key of metadata.<m> outside prefix was added,
// removed or changed.
func unchangedOutside(m, prefix string) string { return unchangedUnless(m, "k.startsWith("+prefix+")") }

// unchangedUnless is CEL that holds when no key k of metadata.<m> for which exempt (CEL on k)
// is false was added, removed or changed. Written without map literals so it type-checks for
// absent maps.
func unchangedUnless(m, exempt string) string {
	side := func(a, b string) string {
		return fmt.Sprintf("(!has(%[1]s.metadata.%[3]s) || %[1]s.metadata.%[3]s.all(k, %[4]s || (has(%[2]s.metadata.%[3]s) && k in %[2]s.metadata.%[3]s && %[2]s.metadata.%[3]s[k] == %[1]s.metadata.%[3]s[k])))",
			a, b, m, exempt)
	}
	return side("object", "oldObject") + " && " + side("oldObject", "object")
}

// otherConditions is CEL for the side's status conditions other than the agent's own, in
// order (the patch merges by type, so the others keep their places).
func otherConditions(side string) string {
	return fmt.Sprintf("%s.?status.?conditions.orValue([]).filter(c, c.type != %s)", side, celString(config.ConditionGPUStackReady))
}

// unchangedStatus is CEL that holds when none of the status fields differs between the
// request's object and the stored node; optional selection makes an absent field equal only
// to an absent one.
func unchangedStatus(fields []string) string {
	terms := make([]string, len(fields))
	for i, f := range fields {
		terms[i] = fmt.Sprintf("object.?status.?%[1]s == oldObject.?status.?%[1]s", f)
	}
	return strings.Join(terms, " && ")
}

// nodeStatusFields are core/v1 NodeStatus's fields besides conditions, each with the
// Kubernetes minor whose Node schema has it ("" for the oldest supported): the API server
// rejects CEL that names a field its schema lacks, and a policy that does not compile denies
// every agent request, so only the fields of spec.kubernetesVersion are compared. A unit test
// keeps the list complete against k8s.io/api.
var nodeStatusFields = []struct{ name, since string }{
	{"capacity", ""}, {"allocatable", ""}, {"phase", ""}, {"addresses", ""},
	{"daemonEndpoints", ""}, {"nodeInfo", ""}, {"images", ""}, {"volumesInUse", ""},
	{"volumesAttached", ""}, {"config", ""}, {"runtimeHandlers", ""},
	{"features", "1.31"}, {"declaredFeatures", "1.35"},
}

func (c *plan) nodeStatusFields() ([]string, error) {
	kube, err := matrix.ParseVersion(c.p.Spec.KubernetesVersion)
	if err != nil {
		return nil, fmt.Errorf("spec.kubernetesVersion: %w", err)
	}
	var out []string
	for _, f := range nodeStatusFields {
		if f.since == "" || kube.Compare(matrix.MustParse(f.since)) >= 0 {
			out = append(out, f.name)
		}
	}
	return out, nil
}

// celString is a CEL string literal; the values are names and label prefixes (no quotes).
func celString(s string) string { return "'" + strings.ReplaceAll(s, "'", `\'`) + "'" }
