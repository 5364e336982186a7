package audit

import (
	"cmp"
	"maps"
	"slices"
	"sort"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Rule is one RBAC rule a service account holds, and the binding that grants it.
type Rule struct {
	GrantedBy       string   `json:"grantedBy"` // "ClusterRoleBinding/x → ClusterRole/y"
	Scope           string   `json:"scope"`     // "cluster" or the namespace of a RoleBinding
	APIGroups       []string `json:"apiGroups,omitempty"`
	Resources       []string `json:"resources,omitempty"`
	ResourceNames   []string `json:"resourceNames,omitempty"`
	NonResourceURLs []string `json:"nonResourceURLs,omitempty"`
	Verbs           []string `json:"verbs"`
}

// index holds the decoded objects the audit reads.
type index struct {
	workloads         []*workload
	clusterRoles      map[string]*rbacv1.ClusterRole
	roles             map[string]*rbacv1.Role // namespace/name
	clusterBindings   []*rbacv1.ClusterRoleBinding
	bindings          []*rbacv1.RoleBinding
	configMaps        map[string]*corev1.ConfigMap // namespace/name
	admissionPolicies []AdmissionPolicy
	namespaces        []Namespace
}

func indexObjects(objs []*unstructured.Unstructured) (*index, error) {
	idx := &index{
		clusterRoles: map[string]*rbacv1.ClusterRole{},
		roles:        map[string]*rbacv1.Role{},
		configMaps:   map[string]*corev1.ConfigMap{},
	}
	for _, u := range objs {
		var err error
		switch u.GetKind() {
		case "ClusterRole":
			var r rbacv1.ClusterRole
			err = fromUnstructured(u, &r)
			idx.clusterRoles[r.Name] = &r
		case "Role":
			var r rbacv1.Role
			err = fromUnstructured(u, &r)
			idx.roles[r.Namespace+"/"+r.Name] = &r
		case "ClusterRoleBinding":
			var b rbacv1.ClusterRoleBinding
			err = fromUnstructured(u, &b)
			idx.clusterBindings = append(idx.clusterBindings, &b)
		case "RoleBinding":
			var b rbacv1.RoleBinding
			err = fromUnstructured(u, &b)
			idx.bindings = append(idx.bindings, &b)
		case "ConfigMap":
			var cm corev1.ConfigMap
			err = fromUnstructured(u, &cm)
			idx.configMaps[cm.Namespace+"/"+cm.Name] = &cm
		case "ValidatingAdmissionPolicy":
			var vap admissionv1.ValidatingAdmissionPolicy
			err = fromUnstructured(u, &vap)
			ap := AdmissionPolicy{Name: vap.Name, Rules: []string{}}
			if vap.Spec.FailurePolicy != nil {
				ap.FailurePolicy = string(*vap.Spec.FailurePolicy)
			}
			for _, v := range vap.Spec.Validations {
				ap.Rules = append(ap.Rules, cmp.Or(v.Message, v.Expression))
			}
			idx.admissionPolicies = append(idx.admissionPolicies, ap)
		case "Namespace":
			ns := Namespace{Name: u.GetName()}
			for k, v := range u.GetLabels() {
				if mode, ok := strings.CutPrefix(k, "pod-security.kubernetes.io/"); ok && !strings.HasSuffix(mode, "-version") {
					if ns.PodSecurity == nil {
						ns.PodSecurity = map[string]string{}
					}
					ns.PodSecurity[mode] = v
				}
			}
			idx.namespaces = append(idx.namespaces, ns)
		default:
			var w *workload
			if w, err = decodeWorkload(u); w != nil {
				idx.workloads = append(idx.workloads, w)
			}
		}
		if err != nil {
			return nil, err
		}
	}
	sort.SliceStable(idx.workloads, func(i, j int) bool {
		a, b := idx.workloads[i], idx.workloads[j]
		if a.namespace != b.namespace {
			return a.namespace < b.namespace
		}
		if a.name != b.name {
			return a.name < b.name
		}
		return a.kind < b.kind
	})
	sort.Slice(idx.admissionPolicies, func(i, j int) bool { return idx.admissionPolicies[i].Name < idx.admissionPolicies[j].Name })
	sort.Slice(idx.namespaces, func(i, j int) bool { return idx.namespaces[i].Name < idx.namespaces[j].Name })
	return idx, nil
}

func boundTo(subjects []rbacv1.Subject, bindingNS, sa string) bool {
	for _, s := range subjects {
		ns := s.Namespace
		if ns == "" {
			ns = bindingNS
		}
		if s.Kind == rbacv1.ServiceAccountKind && ns+"/"+s.Name == sa {
			return true
		}
	}
	return false
}

// rules resolves every rule the service account (namespace/name) holds.
func (idx *index) rules(sa string) []Rule {
	out := []Rule{}
	for _, b := range idx.clusterBindings {
		if boundTo(b.Subjects, "", sa) {
			out = append(out, idx.roleRules(b.RoleRef, "", "ClusterRoleBinding/"+b.Name, "cluster")...)
		}
	}
	for _, b := range idx.bindings {
		if boundTo(b.Subjects, b.Namespace, sa) {
			out = append(out, idx.roleRules(b.RoleRef, b.Namespace, "RoleBinding/"+b.Namespace+"/"+b.Name, b.Namespace)...)
		}
	}
	return out
}

func (idx *index) roleRules(ref rbacv1.RoleRef, ns, binding, scope string) []Rule {
	var policy []rbacv1.PolicyRule
	role := ref.Kind + "/" + ref.Name
	switch ref.Kind {
	case "ClusterRole":
		if r, ok := idx.clusterRoles[ref.Name]; ok {
			policy = r.Rules
		}
	case "Role":
		if r, ok := idx.roles[ns+"/"+ref.Name]; ok {
			policy = r.Rules
		}
	}
	if policy == nil {
		// A binding to a role outside the tree (e.g. a built-in ClusterRole) still grants it.
		return []Rule{{GrantedBy: binding + " → " + role + " (not in the rendered objects)", Scope: scope, Verbs: []string{"?"}}}
	}
	out := make([]Rule, 0, len(policy))
	for _, p := range policy {
		out = append(out, Rule{
			GrantedBy: binding + " → " + role, Scope: scope,
			APIGroups: p.APIGroups, Resources: p.Resources, ResourceNames: p.ResourceNames,
			NonResourceURLs: p.NonResourceURLs, Verbs: p.Verbs,
		})
	}
	return out
}

// subjects lists every service account named by a binding, sorted.
func (idx *index) subjects() []string {
	set := map[string]bool{}
	add := func(subjects []rbacv1.Subject, ns string) {
		for _, s := range subjects {
			if s.Kind == rbacv1.ServiceAccountKind {
				n := s.Namespace
				if n == "" {
					n = ns
				}
				set[n+"/"+s.Name] = true
			}
		}
	}
	for _, b := range idx.clusterBindings {
		add(b.Subjects, "")
	}
	for _, b := range idx.bindings {
		add(b.Subjects, b.Namespace)
	}
	return slices.Sorted(maps.Keys(set))
}

// String is the rule in one line: "patch nodes (core)".
func (r Rule) String() string {
	what := append(append([]string{}, r.Resources...), r.NonResourceURLs...)
	groups := make([]string, len(r.APIGroups))
	for i, g := range r.APIGroups {
		if g == "" {
			g = "core"
		}
		groups[i] = g
	}
	s := strings.TrimSpace(strings.Join(r.Verbs, ",") + " " + strings.Join(what, ","))
	if len(groups) > 0 {
		s += " (" + strings.Join(groups, ",") + ")"
	}
	if len(r.ResourceNames) > 0 {
		s += " named " + strings.Join(r.ResourceNames, ",")
	}
	return s
}
