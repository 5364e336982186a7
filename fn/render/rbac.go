package render

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
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

func rulesFor(sa string) []rbacv1.PolicyRule {
	if sa == NameNodeAgent {
		return nodeAgentRules
	}
	return nodeWriterRules
}

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
	return names
}

// nodeWriters are the service accounts bound to nodeWriterRules.
func (c *plan) nodeWriters() []string {
	if c.featureDiscovery() {
		return []string{NameNodeAgent, NameFeatureDiscovery}
	}
	return []string{NameNodeAgent}
}

// needsToken reports whether a component's pods talk to the API server.
func (c *plan) needsToken(sa string) bool {
	for _, w := range c.nodeWriters() {
		if w == sa {
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
	for _, sa := range c.nodeWriters() {
		// Cluster-scoped names carry the namespace so two policies in one cluster do not collide.
		name := c.clusterRoleName(sa)
		m := c.meta(sa, false) // labelled with the component; ':' is not allowed in label values
		m.Name = name
		out = append(out,
			Object{Stage: StagePrereqs, Component: "rbac", Obj: &rbacv1.ClusterRole{
				TypeMeta:   typeMeta("rbac.authorization.k8s.io/v1", "ClusterRole"),
				ObjectMeta: m,
				Rules:      rulesFor(sa),
			}},
			Object{Stage: StagePrereqs, Component: "rbac", Obj: &rbacv1.ClusterRoleBinding{
				TypeMeta:   typeMeta("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
				ObjectMeta: m,
				RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
				Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: c.ns}},
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
