package diff

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gpupolicy/gpupolicy/fn/audit"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// The comparisons flatten each audit into sets of one-line facts per subject, so a change is
// simply the facts added and removed; a new workload shows all of its facts as added.

func workloadName(w audit.Workload) string { return w.Kind + " " + w.Namespace + "/" + w.Name }

func imagesOf(r *audit.Report) map[string]string {
	out := map[string]string{}
	for _, w := range r.Workloads {
		for _, c := range w.Containers {
			out[workloadName(w)+" container "+c.Name] = c.Image
		}
	}
	return out
}

func privilegesOf(r *audit.Report) map[string][]string {
	out := map[string][]string{}
	for _, w := range r.Workloads {
		for _, c := range w.Containers {
			var f []string
			add := func(on bool, s string) {
				if on {
					f = append(f, s)
				}
			}
			add(c.Privileged, "privileged")
			add(w.HostPID, "hostPID")
			add(w.HostIPC, "hostIPC")
			add(w.HostNetwork, "hostNetwork")
			add(c.AllowPrivilegeEscalation, "allowPrivilegeEscalation")
			add(c.RunAsUser != nil && *c.RunAsUser == 0, "runs as root")
			add(!c.ReadOnlyRootFilesystem, "writable root filesystem")
			for _, cp := range c.CapabilitiesAdd {
				f = append(f, "capability "+cp)
			}
			mounted := map[string]bool{}
			for _, h := range c.HostPaths {
				f = append(f, fmt.Sprintf("hostPath %s (%s)", h.Path, map[bool]string{true: "ro", false: "rw"}[h.ReadOnly]))
				mounted[h.Path] = !h.ReadOnly
			}
			for _, hw := range c.HostWrites {
				if !mounted[hw.Path] { // a read-write mount already says it
					f = append(f, "writes "+hw.Path)
				}
			}
			out[workloadName(w)+" container "+c.Name] = f
		}
	}
	for _, ns := range r.Namespaces {
		var f []string
		for mode, level := range ns.PodSecurity {
			f = append(f, "pod-security "+mode+" "+level)
		}
		out["Namespace "+ns.Name] = f
	}
	return out
}

// guardrailsOf lists each admission policy's rules; a removed rule loosens what the node
// agent may do.
func guardrailsOf(r *audit.Report) map[string][]string {
	out := map[string][]string{}
	for _, p := range r.AdmissionPolicies {
		out["ValidatingAdmissionPolicy "+p.Name] = append([]string{"failurePolicy " + p.FailurePolicy}, p.Rules...)
	}
	return out
}

// gatesOf lists where each workload runs, and the RuntimeClass scheduling selectors.
func gatesOf(r *audit.Report, objs []*unstructured.Unstructured) map[string][]string {
	out := map[string][]string{}
	for _, w := range r.Workloads {
		f := append([]string{}, w.NodeSelector...)
		if w.RuntimeClass != "" {
			f = append(f, "runtimeClassName "+w.RuntimeClass)
		}
		out[workloadName(w)] = f
	}
	for _, u := range objs {
		if u.GetKind() != "RuntimeClass" {
			continue
		}
		var f []string
		handler, _, _ := unstructured.NestedString(u.Object, "handler")
		f = append(f, "handler "+handler)
		sel, _, _ := unstructured.NestedStringMap(u.Object, "scheduling", "nodeSelector")
		for k, v := range sel {
			f = append(f, k+"="+v)
		}
		out["RuntimeClass "+u.GetName()] = f
	}
	deviceClassesOf(objs, out)
	return out
}

func rbacOf(r *audit.Report) map[string][]string {
	out := map[string][]string{}
	add := func(sa string, rules []audit.Rule) {
		for _, rule := range rules {
			out[sa] = append(out[sa], rule.Scope+": "+rule.String())
		}
		if _, ok := out[sa]; !ok {
			out[sa] = nil
		}
	}
	for _, w := range r.Workloads {
		add("ServiceAccount "+w.Namespace+"/"+w.ServiceAccount, w.RBAC)
	}
	for _, s := range r.OtherSubjects {
		add("ServiceAccount "+s.ServiceAccount, s.RBAC)
	}
	return out
}

// dropInOf is the rendered containerd drop-in text ("" when the tree has none).
func dropInOf(objs []*unstructured.Unstructured) string {
	for _, u := range objs {
		if u.GetKind() == "ConfigMap" && u.GetName() == config.DropInConfigMap {
			s, _, _ := unstructured.NestedString(u.Object, "data", config.DropInFile)
			return s
		}
	}
	return ""
}

// migLayoutsOf is the rendered MIG layouts, one "# <pool file>" section per pool in key
// order ("" when no pool declares MIG).
func migLayoutsOf(objs []*unstructured.Unstructured) string {
	for _, u := range objs {
		if u.GetKind() == "ConfigMap" && u.GetName() == config.MIGConfigMap {
			data, _, _ := unstructured.NestedStringMap(u.Object, "data")
			var b strings.Builder
			for _, k := range slices.Sorted(maps.Keys(data)) {
				fmt.Fprintf(&b, "# %s\n%s", k, data[k])
			}
			return b.String()
		}
	}
	return ""
}

// compareSets lists, per subject in sorted order, the facts added and removed.
func compareSets(base, head map[string][]string) []SetChange {
	subjects := map[string]bool{}
	for k := range base {
		subjects[k] = true
	}
	for k := range head {
		subjects[k] = true
	}
	var out []SetChange
	for _, s := range slices.Sorted(maps.Keys(subjects)) {
		added, removed := setDiff(head[s], base[s]), setDiff(base[s], head[s])
		if len(added) > 0 || len(removed) > 0 {
			out = append(out, SetChange{Subject: s, Added: added, Removed: removed})
		}
	}
	return out
}

// setDiff is a \ b, sorted and deduplicated.
func setDiff(a, b []string) []string {
	in := map[string]bool{}
	for _, x := range b {
		in[x] = true
	}
	var out []string
	for _, x := range a {
		if !in[x] {
			out = append(out, x)
			in[x] = true
		}
	}
	sort.Strings(out)
	return out
}
