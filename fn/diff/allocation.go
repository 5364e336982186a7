package diff

import (
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gpupolicy/gpupolicy/fn/audit"
	"github.com/gpupolicy/gpupolicy/fn/render"
	"github.com/gpupolicy/gpupolicy/fn/validate"
)

// allocationOf maps each node group ("" for the nodes outside every pool, else the pool's
// name) to the plugin that hands its GPUs to pods: the device plugin or the DRA plugin, read
// from the rendered DaemonSet names.
func allocationOf(r *audit.Report) map[string]string {
	out := map[string]string{}
	for _, w := range r.Workloads {
		if w.Kind != "DaemonSet" {
			continue
		}
		for _, p := range []struct{ prefix, mode string }{{render.NameDRAPlugin, "DRA"}, {render.NameDevicePlugin, "the device plugin"}} {
			if w.Name == p.prefix || strings.HasPrefix(w.Name, p.prefix+"-") {
				out[strings.TrimPrefix(strings.TrimPrefix(w.Name, p.prefix), "-")] = p.mode
			}
		}
	}
	return out
}

// allocationFindings warn about a node group that changes how its GPUs reach pods: pods
// written for the other path stop scheduling there, so workloads must move first.
func (r *Report) allocationFindings(base, head *audit.Report) {
	b, h := allocationOf(base), allocationOf(head)
	for _, group := range unionKeys(b, h) {
		from, to := b[group], h[group]
		if from == "" || to == "" || from == to {
			continue
		}
		where := "the GPU nodes outside every pool"
		if group != "" {
			where = "node pool " + group
		}
		how := "pods that request the extended resource (nvidia.com/gpu or the pool's resourceName) no longer schedule there once their node's device plugin stops; move them to ResourceClaims of DeviceClass gpu.nvidia.com (or mig.nvidia.com) first"
		if to == "the device plugin" {
			how = "pods with ResourceClaims of driver gpu.nvidia.com no longer schedule there once the node's ResourceSlices are withdrawn; move them to the extended resource first"
		}
		r.add(validate.SeverityWarning, "allocation of %s changes from %s to %s: %s", where, from, to, how)
	}
}

// deviceClassesOf are the DeviceClass CEL selectors, which decide which published devices a
// claim of that class may get.
func deviceClassesOf(objs []*unstructured.Unstructured, out map[string][]string) {
	for _, u := range objs {
		if u.GetKind() != "DeviceClass" {
			continue
		}
		sels, _, _ := unstructured.NestedSlice(u.Object, "spec", "selectors")
		var f []string
		for _, s := range sels {
			if m, ok := s.(map[string]any); ok {
				if expr, _, _ := unstructured.NestedString(m, "cel", "expression"); expr != "" {
					f = append(f, "selector "+expr)
				}
			}
		}
		out["DeviceClass "+u.GetName()] = f
	}
}
