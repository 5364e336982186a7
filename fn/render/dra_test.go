package render_test

import (
	"slices"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"

	"github.com/gpupolicy/gpupolicy/fn/pipeline"
	"github.com/gpupolicy/gpupolicy/fn/render"
)

// allocationPolicy has the rest of the GPU nodes on spec.allocation and one pool "training"
// on its own allocation ("" leaves a field unset).
func allocationPolicy(t *testing.T, spec, pool string) render.Objects {
	t.Helper()
	body := cdiPolicyHead + "  driver: {version: \"580.95.05\"}\n"
	if spec != "" {
		body += "  allocation: " + spec + "\n"
	}
	body += "  nodePools:\n  - name: training\n    nodeSelector: {gpupolicy.dev/pool: training}\n"
	if pool != "" {
		body += "    allocation: " + pool + "\n"
	}
	_, objs, res := pipeline.Load([]byte(body), today)
	if res.HasErrors() {
		t.Fatalf("%s", res.Text("policy.yaml"))
	}
	return objs
}

// allocationObjects are the DaemonSets that hand GPUs to pods and the DRA-only objects.
func allocationObjects(objs render.Objects) []string {
	var out []string
	for _, o := range objs {
		kind := o.Obj.GetObjectKind().GroupVersionKind().Kind
		name := o.Obj.GetName()
		switch {
		case kind == "DaemonSet" && (strings.HasPrefix(name, render.NameDevicePlugin) || strings.HasPrefix(name, render.NameDRAPlugin)),
			kind == "DeviceClass", strings.Contains(name, render.NameDRAGuardrails):
			out = append(out, o.String())
		case strings.Contains(name, render.NameDRAPlugin):
			out = append(out, o.String())
		}
	}
	return out
}

// TestAllocationSwitchesByOneField: each node group is served by exactly one of the device
// plugin and the DRA plugin, chosen by spec.allocation and a pool's override; the DRA objects
// exist only when some group uses DRA.
func TestAllocationSwitchesByOneField(t *testing.T) {
	draShared := []string{
		"ServiceAccount gpu-system/gpu-dra-plugin",
		"ClusterRole gpupolicy:gpu-system:gpu-dra-plugin",
		"ClusterRoleBinding gpupolicy:gpu-system:gpu-dra-plugin",
		"DeviceClass gpu.nvidia.com",
		"DeviceClass mig.nvidia.com",
		"ValidatingAdmissionPolicy gpupolicy-resourceslice-guardrails",
		"ValidatingAdmissionPolicyBinding gpupolicy-resourceslice-guardrails",
	}
	for _, tc := range []struct {
		spec, pool string
		want       []string
	}{
		{"", "", []string{"DaemonSet gpu-system/gpu-device-plugin", "DaemonSet gpu-system/gpu-device-plugin-training"}},
		{"", "dra", append(slices.Clone(draShared), "DaemonSet gpu-system/gpu-device-plugin", "DaemonSet gpu-system/gpu-dra-plugin-training")},
		{"dra", "", append(slices.Clone(draShared), "DaemonSet gpu-system/gpu-dra-plugin", "DaemonSet gpu-system/gpu-dra-plugin-training")},
		{"dra", "devicePlugin", append(slices.Clone(draShared), "DaemonSet gpu-system/gpu-dra-plugin", "DaemonSet gpu-system/gpu-device-plugin-training")},
	} {
		got := allocationObjects(allocationPolicy(t, tc.spec, tc.pool))
		slices.Sort(got)
		want := slices.Clone(tc.want)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("spec.allocation %q, pool %q renders\n%q\nwant\n%q", tc.spec, tc.pool, got, want)
		}
	}
}

// TestDRAPluginPlacement: the DRA plugin is gated and placed like the device plugin it replaces
// (the rest excludes the pools), mounts the kubelet's plugin directories and the CDI directory,
// and the node guardrails do not list it (it writes no node) while the ResourceSlice guardrails
// match only it.
func TestDRAPluginPlacement(t *testing.T) {
	objs := allocationPolicy(t, "dra", "")
	var rest, pool *appsv1.DaemonSet
	var nodeGuard, sliceGuard *admissionv1.ValidatingAdmissionPolicy
	for _, o := range objs {
		switch v := o.Obj.(type) {
		case *appsv1.DaemonSet:
			switch v.Name {
			case render.NameDRAPlugin:
				rest = v
			case render.NameDRAPlugin + "-training":
				pool = v
			}
		case *admissionv1.ValidatingAdmissionPolicy:
			switch v.Name {
			case render.NameGuardrails:
				nodeGuard = v
			case render.NameDRAGuardrails:
				sliceGuard = v
			}
		}
	}
	if rest == nil || pool == nil || nodeGuard == nil || sliceGuard == nil {
		t.Fatalf("missing objects: rest %v pool %v guardrails %v %v", rest != nil, pool != nil, nodeGuard != nil, sliceGuard != nil)
	}
	terms := rest.Spec.Template.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) != 1 || !hasIn(terms[0], "nvidia.com/gpu.deploy.device-plugin", "true") || !strings.Contains(terms[0].String(), "NotIn") {
		t.Errorf("gpu-dra-plugin must be gated on the device-plugin stage and exclude the pools: %v", terms)
	}
	pterms := pool.Spec.Template.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(pterms) != 1 || !hasIn(pterms[0], "gpupolicy.dev/pool", "training") {
		t.Errorf("gpu-dra-plugin-training must select its pool: %v", pterms)
	}
	var paths []string
	for _, v := range pool.Spec.Template.Spec.Volumes {
		if v.HostPath != nil {
			paths = append(paths, v.HostPath.Path)
		}
	}
	for _, want := range []string{"/var/lib/kubelet/plugins", "/var/lib/kubelet/plugins_registry", "/var/run/cdi"} {
		if !slices.Contains(paths, want) {
			t.Errorf("gpu-dra-plugin-training lacks the host path %s: %v", want, paths)
		}
	}
	if c := pool.Spec.Template.Spec.Containers[0]; !slices.Equal(c.Command[:2], []string{"gpu-device-plugin", "dra"}) || *pool.Spec.Template.Spec.AutomountServiceAccountToken != true {
		t.Errorf("gpu-dra-plugin-training runs %v with token %v, want gpu-device-plugin dra with a token", c.Command, *pool.Spec.Template.Spec.AutomountServiceAccountToken)
	}
	if mc := nodeGuard.Spec.MatchConditions[0].Expression; strings.Contains(mc, render.NameDRAPlugin) {
		t.Errorf("node guardrails list the DRA plugin, which writes no node: %s", mc)
	}
	if mc := sliceGuard.Spec.MatchConditions[0].Expression; !strings.Contains(mc, "system:serviceaccount:gpu-system:"+render.NameDRAPlugin) {
		t.Errorf("ResourceSlice guardrails do not match the DRA plugin: %s", mc)
	}
}
