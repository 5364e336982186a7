package render

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
)

// nodeWriterRules are the only API permissions the output grants: the node agent (gates,
// driver version and drift labels) and feature discovery (GPU labels) read nodes, patch their
// own node's nvidia.com/ labels (the guardrails confine the patch) and post events.
var nodeWriterRules = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "list", "watch", "patch"}},
	{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
}

// nodeAgentRules add the one status write: the node agent patches its own node's
// GPUStackReady condition (the guardrails confine it to that condition).
var nodeAgentRules = append(slices.Clone(nodeWriterRules),
	rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"nodes/status"}, Verbs: []string{"patch"}})

// upgradeClusterRules let the node agent's upgrade step see the pods on its node (to wait for
// jobs and pick the GPU pods) and evict them through the Eviction API, which respects
// PodDisruptionBudgets. Admission cannot confine an eviction to the agent's own node (it sees
// only the Eviction, not the pod), so the step itself evicts only pods whose spec.nodeName is
// its node.
var upgradeClusterRules = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}},
	{APIGroups: []string{""}, Resources: []string{"pods/eviction"}, Verbs: []string{"create"}},
}

// upgradeNamespaceRules, in the policy's namespace only: the slots (Leases), the driver
// DaemonSets and their revisions (is the node's driver pod current?), and deleting its own
// driver pod so the OnDelete DaemonSet starts the new one (the guardrails confine the delete
// to the driver pod on the agent's node).
var upgradeNamespaceRules = []rbacv1.PolicyRule{
	{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update", "delete"}},
	{APIGroups: []string{"apps"}, Resources: []string{"daemonsets", "controllerrevisions"}, Verbs: []string{"get", "list", "watch"}},
	{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"delete"}},
}

// upgrades reports whether the node agent runs the upgrade step: some driver stage runs the
// driver container (upgrades), or some driver taints on drift.
func (c *plan) upgrades() bool {
	s := &c.p.Spec
	if containerDriver(s) || s.Driver.OnDrift == v1alpha1.OnDriftTaint {
		return true
	}
	return false
}

func (c *plan) rulesFor(sa string) []rbacv1.PolicyRule {
	if sa == NameNodeAgent && c.upgrades() {
		return append(slices.Clone(nodeAgentRules), upgradeClusterRules...)
	}
	return rulesFor(sa)
}

func rulesFor(sa string) []rbacv1.PolicyRule {
	if sa == NameNodeAgent {
		return nodeAgentRules
	}
	return nodeWriterRules
}

// discoveryRules let gpu-discovery read and patch its node (the guardrails confine the patch
// to adding nvidia.com/gpu.present on its own node) and report a lost GPU as an Event. It
// reads one node by name, so it needs neither list nor watch.
var discoveryRules = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "patch"}},
	{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
}

// builtinDiscovery reports whether gpu-discovery runs.
func (c *plan) builtinDiscovery() bool { return c.discovery() == v1alpha1.DiscoveryBuiltin }

// serviceAccounts are one per component so the audit attributes every permission to one
// DaemonSet; only those with RBAC rules mount a token.
func (c *plan) serviceAccounts() []string {
	names := []string{NameNodeAgent, NameDriver, NameToolkit, NameDevicePlugin}
	if c.featureDiscovery() {
		names = append(names, NameFeatureDiscovery)
	}
	if c.exporter() {
		names = append(names, NameExporter)
	}
	if c.builtinDiscovery() {
		names = append(names, NameDiscovery)
	}
	if c.usesDRA() {
		names = append(names, NameDRAPlugin)
	}
	return names
}

// nodeWriters are the service accounts bound to nodeWriterRules.
func (c *plan) nodeWriters() []string {
	if c.featureDiscovery() {
		return []string{NameNodeAgent, NameFeatureDiscovery}
	}
	return []string{NameNodeAgent}
}

// roles are the service accounts with API permissions and their rules.
func (c *plan) roles() []role {
	var out []role
	for _, sa := range c.nodeWriters() {
		out = append(out, role{sa, c.rulesFor(sa)})
	}
	if c.builtinDiscovery() {
		out = append(out, role{NameDiscovery, discoveryRules})
	}
	if c.usesDRA() {
		out = append(out, role{NameDRAPlugin, draRules})
	}
	return out
}

type role struct {
	serviceAccount string
	rules          []rbacv1.PolicyRule
}

// needsToken reports whether a component's pods talk to the API server.
func (c *plan) needsToken(sa string) bool {
	for _, r := range c.roles() {
		if r.serviceAccount == sa {
			return true
		}
	}
	return false
}

func renderRBAC(c *plan) (Objects, error) {
	var out Objects
	for _, sa := range c.serviceAccounts() {
		automount := c.needsToken(sa)
		out = append(out, Object{Stage: StagePrereqs, Component: "rbac", Obj: &corev1.ServiceAccount{
			TypeMeta:                     typeMeta("v1", "ServiceAccount"),
			ObjectMeta:                   c.meta(sa, true),
			AutomountServiceAccountToken: &automount,
		}})
	}
	for _, r := range c.roles() {
		sa := r.serviceAccount
		// Cluster-scoped names carry the namespace so two policies in one cluster do not collide.
		name := c.clusterRoleName(sa)
		m := c.meta(sa, false) // labelled with the component; ':' is not allowed in label values
		m.Name = name
		out = append(out,
			Object{Stage: StagePrereqs, Component: "rbac", Obj: &rbacv1.ClusterRole{
				TypeMeta:   typeMeta("rbac.authorization.k8s.io/v1", "ClusterRole"),
				ObjectMeta: m,
				Rules:      r.rules,
			}},
			Object{Stage: StagePrereqs, Component: "rbac", Obj: &rbacv1.ClusterRoleBinding{
				TypeMeta:   typeMeta("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
				ObjectMeta: m,
				RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
				Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: c.ns}},
			}},
		)
	}
	if c.upgrades() {
		m := c.meta(NameNodeAgent+"-upgrade", true)
		out = append(out,
			Object{Stage: StagePrereqs, Component: "rbac", Obj: &rbacv1.Role{
				TypeMeta:   typeMeta("rbac.authorization.k8s.io/v1", "Role"),
				ObjectMeta: m,
				Rules:      upgradeNamespaceRules,
			}},
			Object{Stage: StagePrereqs, Component: "rbac", Obj: &rbacv1.RoleBinding{
				TypeMeta:   typeMeta("rbac.authorization.k8s.io/v1", "RoleBinding"),
				ObjectMeta: m,
				RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: m.Name},
				Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: NameNodeAgent, Namespace: c.ns}},
			}},
		)
	}
	return out, nil
}

// serviceAccountUser is the user name a service account authenticates as.
func (c *plan) serviceAccountUser(sa string) string {
	return "system:serviceaccount:" + c.ns + ":" + sa
}

// clusterRoleName follows the "prefix:scope:name" habit of Kubernetes' own cluster roles.
func (c *plan) clusterRoleName(sa string) string { return "gpupolicy:" + c.ns + ":" + sa }
