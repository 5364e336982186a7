package render_test

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/gpupolicy/gpupolicy/fn/pipeline"
	"github.com/gpupolicy/gpupolicy/fn/render"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// renderDiscovery renders a policy with spec.discovery set to mode ("" leaves it unset).
func renderDiscovery(t *testing.T, mode string) render.Objects {
	t.Helper()
	body := cdiPolicyHead + "  driver: {version: \"580.95.05\"}\n"
	if mode != "" {
		body += "  discovery: " + mode + "\n"
	}
	_, objs, res := pipeline.Load([]byte(body), today)
	if res.HasErrors() {
		t.Fatalf("%s", res.Text("policy.yaml"))
	}
	return objs
}

// discoveryObjects are the objects named for discovery: its DaemonSet, ServiceAccount, RBAC
// and the NodeFeatureRule.
func discoveryObjects(objs render.Objects) []string {
	var out []string
	for _, o := range objs {
		if strings.Contains(o.Obj.GetName(), render.NameDiscovery) || strings.HasSuffix(o.Obj.GetName(), "-gpu-present") {
			out = append(out, o.String())
		}
	}
	return out
}

func TestDiscoveryModes(t *testing.T) {
	builtin := []string{
		"ServiceAccount gpu-system/gpu-discovery",
		"ClusterRole gpupolicy:gpu-system:gpu-discovery",
		"ClusterRoleBinding gpupolicy:gpu-system:gpu-discovery",
		"DaemonSet gpu-system/gpu-discovery",
	}
	for mode, want := range map[string][]string{
		"":        builtin, // the default
		"builtin": builtin,
		"nfd":     {"NodeFeatureRule gpupolicy-gpu-system-gpu-present"},
		"none":    nil,
	} {
		if got := discoveryObjects(renderDiscovery(t, mode)); !slices.Equal(got, want) {
			t.Errorf("discovery %q renders\n%q\nwant\n%q", mode, got, want)
		}
	}
}

// TestDiscoveryDaemonSet: every Linux node (the entry label is what it sets), the prerequisites
// stage, unprivileged and non-root, /sys read-only only, its own token and narrow RBAC.
func TestDiscoveryDaemonSet(t *testing.T) {
	objs := renderDiscovery(t, "builtin")
	var ds *appsv1.DaemonSet
	var stage render.Stage
	var role *rbacv1.ClusterRole
	for _, o := range objs {
		switch x := o.Obj.(type) {
		case *appsv1.DaemonSet:
			if x.Name == render.NameDiscovery {
				ds, stage = x, o.Stage
			}
		case *rbacv1.ClusterRole:
			if strings.HasSuffix(x.Name, ":"+render.NameDiscovery) {
				role = x
			}
		}
	}
	if ds == nil || role == nil {
		t.Fatal("gpu-discovery DaemonSet or ClusterRole not rendered")
	}
	if stage != render.StagePrereqs {
		t.Errorf("stage %s, want %s (before the driver stage)", stage, render.StagePrereqs)
	}
	spec := ds.Spec.Template.Spec
	if len(spec.NodeSelector) != 1 || spec.NodeSelector[corev1.LabelOSStable] != "linux" || spec.Affinity != nil {
		t.Errorf("placement: nodeSelector %v, affinity %v; want every Linux node", spec.NodeSelector, spec.Affinity)
	}
	if !slices.ContainsFunc(spec.Tolerations, func(tl corev1.Toleration) bool { return tl.Key == "nvidia.com/gpu" }) {
		t.Errorf("tolerations %v: the GPU taint must be tolerated", spec.Tolerations)
	}
	if spec.ServiceAccountName != render.NameDiscovery || spec.AutomountServiceAccountToken == nil || !*spec.AutomountServiceAccountToken {
		t.Errorf("service account %q, automount %v", spec.ServiceAccountName, spec.AutomountServiceAccountToken)
	}
	if spec.HostPID || spec.HostNetwork || spec.HostIPC || len(spec.Containers) != 1 || len(spec.InitContainers) != 0 {
		t.Errorf("host namespaces or extra containers in %+v", spec)
	}
	c := spec.Containers[0]
	sc := c.SecurityContext
	if sc == nil || sc.Privileged == nil || *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot ||
		sc.Capabilities == nil || len(sc.Capabilities.Add) != 0 || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("security context %+v: want unprivileged, non-root, read-only root, no capabilities", sc)
	}
	if len(spec.Volumes) != 1 || spec.Volumes[0].HostPath == nil || spec.Volumes[0].HostPath.Path != "/sys" ||
		len(c.VolumeMounts) != 1 || !c.VolumeMounts[0].ReadOnly {
		t.Errorf("volumes %+v mounts %+v: want the host's /sys, read-only, and nothing else", spec.Volumes, c.VolumeMounts)
	}
	if !slices.Equal(c.Command[:2], []string{"gpu-node-agent", "discover"}) || c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil {
		t.Errorf("command %q, readiness %+v", c.Command, c.ReadinessProbe)
	}
	if c.Resources.Limits.Memory().IsZero() {
		t.Error("no memory limit")
	}
	wantRules := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	}
	gotRules, _ := yaml.Marshal(role.Rules)
	wantYAML, _ := yaml.Marshal(wantRules)
	if string(gotRules) != string(wantYAML) {
		t.Errorf("discovery RBAC\n%s\nwant\n%s", gotRules, wantYAML)
	}
}

// TestNodeFeatureRule: NFD's pci.device feature, vendor 10de, class 0300 or 0302, the one label.
func TestNodeFeatureRule(t *testing.T) {
	var rule *unstructured.Unstructured
	for _, o := range renderDiscovery(t, "nfd") {
		if u, ok := o.Obj.(*unstructured.Unstructured); ok && u.GetKind() == "NodeFeatureRule" {
			rule = u
			if o.Stage != render.StagePrereqs {
				t.Errorf("stage %s", o.Stage)
			}
		}
	}
	if rule == nil {
		t.Fatal("no NodeFeatureRule")
	}
	if rule.GetAPIVersion() != "nfd.k8s-sigs.io/v1alpha1" || rule.GetNamespace() != "" {
		t.Errorf("apiVersion %s namespace %q: want nfd.k8s-sigs.io/v1alpha1, cluster-scoped", rule.GetAPIVersion(), rule.GetNamespace())
	}
	got, _ := yaml.Marshal(rule.Object["spec"])
	want := `rules:
- labels:
    ` + config.LabelGPUPresent + `: "true"
  matchFeatures:
  - feature: pci.device
    matchExpressions:
      class:
        op: In
        value:
        - "0300"
        - "0302"
      vendor:
        op: In
        value:
        - 10de
  name: ` + config.LabelGPUPresent + `
`
	if string(got) != want {
		t.Errorf("NodeFeatureRule spec\n%s\nwant\n%s", got, want)
	}
}
