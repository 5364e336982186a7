package diff

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/gpupolicy/gpupolicy/fn/render"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// FieldChange is one field of a rendered object that moved ("" = absent on that side).
type FieldChange struct {
	Path string `json:"path"`
	From string `json:"from,omitempty"`
	To   string `json:"to,omitempty"`
}

// ObjectChange is one object present on both sides whose content differs: the fields that
// moved, and what applying it does to running pods.
type ObjectChange struct {
	Object string        `json:"object"`
	Effect string        `json:"effect,omitempty"`
	Fields []FieldChange `json:"fields"`
}

// SharedChange is one field change that several objects make identically (a renamed policy
// moves app.kubernetes.io/instance on every object); the report lists it once.
type SharedChange struct {
	FieldChange
	Objects int `json:"objects"`
}

// sharedAt is how many objects must make the same change before it is listed once as shared:
// below that, repeating it under each object is clearer than a cross-reference.
const sharedAt = 3

// fieldChanges lists the leaves of a and b that differ, in path order.
func fieldChanges(a, b *unstructured.Unstructured) []FieldChange {
	fa, fb := map[string]string{}, map[string]string{}
	flatten("", a.Object, fa)
	flatten("", b.Object, fb)
	var out []FieldChange
	for _, p := range unionKeys(fa, fb) {
		if fa[p] != fb[p] {
			out = append(out, FieldChange{Path: p, From: fa[p], To: fb[p]})
		}
	}
	return out
}

// plainKey is compiled on first use: every gpupolicy-fn process would pay it at start.
var plainKey = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`) })

// flatten writes every leaf of v under a readable path: map keys that are not plain
// identifiers (label keys, file names) in brackets, list items by their name or key where they
// have one (containers, env, volumes, matchExpressions, tolerations) so a reordering or an
// insertion does not show as every later item changing. A list of scalars (args, values) is one
// leaf, and a text that is itself a YAML map (the agent config in its ConfigMap) is flattened
// into its fields.
func flatten(path string, v any, out map[string]string) {
	switch x := v.(type) {
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(x)) {
			flatten(join(path, k), x[k], out)
		}
	case []any:
		if scalars(x) {
			out[path] = scalarList(x)
			return
		}
		for i, item := range x {
			flatten(path+"["+itemKey(item, i)+"]", item, out)
		}
	case string:
		if strings.Contains(x, "\n") {
			var m map[string]any
			if yaml.Unmarshal([]byte(x), &m) == nil && len(m) > 0 {
				flatten(path, m, out)
				return
			}
			out[path] = textDigest(x)
			return
		}
		out[path] = x
	case nil:
		out[path] = "null"
	default:
		out[path] = fmt.Sprint(x)
	}
}

func join(path, key string) string {
	if !plainKey().MatchString(key) {
		return path + "[" + key + "]"
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

func scalars(x []any) bool {
	for _, item := range x {
		switch item.(type) {
		case map[string]any, []any:
			return false
		}
	}
	return true
}

// scalarList shows a list of scalars as its items separated by spaces, the way a command line
// reads; an empty list is "[]" so that it differs from an absent one.
func scalarList(x []any) string {
	if len(x) == 0 {
		return "[]"
	}
	parts := make([]string, len(x))
	for i, item := range x {
		parts[i] = fmt.Sprint(item)
	}
	return strings.Join(parts, " ")
}

func itemKey(item any, i int) string {
	if m, ok := item.(map[string]any); ok {
		for _, k := range []string{"name", "alert", "record", "key", "mountPath", "containerPort"} {
			if s, ok := m[k]; ok && s != nil {
				return k + "=" + fmt.Sprint(s)
			}
		}
	}
	return fmt.Sprint(i)
}

// textDigest stands for a multi-line text that is not YAML (the TOML drop-in, a CEL rule):
// the line count is enough to see it moved; the drop-in gets its own unified diff.
func textDigest(s string) string {
	return fmt.Sprintf("(text, %d lines, sha256 %s)", strings.Count(strings.TrimSuffix(s, "\n"), "\n")+1, shortHash(s))
}

// changedObject describes one changed object; configMaps are the changed ConfigMaps by name,
// which explain a config hash that moved.
func changedObject(key string, base, head *unstructured.Unstructured, changedConfigMaps []string) ObjectChange {
	oc := ObjectChange{Object: key, Fields: fieldChanges(base, head)}
	switch {
	case head.GetKind() == "ConfigMap" && head.GetName() == config.DropInConfigMap:
		oc.Effect = "the node agent installs the new drop-in on each GPU node as the toolkit stage's pods restart (and restarts containerd when its bytes changed); the containerd drop-in diff below shows it"
	case head.GetKind() == "DaemonSet":
		oc.Effect = daemonSetEffect(key, head, oc.Fields, base, changedConfigMaps)
	}
	return oc
}

const hashPath = "spec.template.metadata.annotations[" + render.AnnotationConfigHash + "]"

// daemonSetEffect says what applying a changed DaemonSet does: any change of the pod template
// replaces its pods, rolling by its update strategy, or only as a person deletes them
// (OnDelete, the driver). A config hash that is the only thing moving means a ConfigMap the
// pods read changed: the report names it, since nothing else in the DaemonSet shows why.
func daemonSetEffect(key string, head *unstructured.Unstructured, fields []FieldChange, base *unstructured.Unstructured, changedConfigMaps []string) string {
	template, onlyHash := false, true
	for _, f := range fields {
		if strings.HasPrefix(f.Path, "spec.template.") {
			template = true
		}
		if f.Path != hashPath {
			onlyHash = false
		}
	}
	if !template {
		return ""
	}
	where := "on the nodes it selects"
	if sel := selection(head); sel != "" {
		where += " (" + sel + ")"
	}
	name := strings.TrimPrefix(key, "DaemonSet ")
	strategy, _, _ := unstructured.NestedString(head.Object, "spec", "updateStrategy", "type")
	var effect string
	if strategy == "OnDelete" {
		effect = "new pod template for DaemonSet " + name + " " + where + "; updateStrategy OnDelete: each node's pod is replaced only when it is deleted"
	} else {
		effect = "restarts the pods of DaemonSet " + name + " " + where
		if mu, ok, _ := unstructured.NestedFieldNoCopy(head.Object, "spec", "updateStrategy", "rollingUpdate", "maxUnavailable"); ok {
			effect += fmt.Sprintf(", at most %v of them at a time", mu)
		}
	}
	if onlyHash {
		var cms []string
		for _, cm := range configMapsOf(base) {
			if slices.Contains(changedConfigMaps, cm) {
				cms = append(cms, "ConfigMap "+cm)
			}
		}
		effect += ". Only its config hash moved"
		if len(cms) > 0 {
			effect += ", because " + strings.Join(cms, " and ") + " changed"
		}
	}
	return effect
}

// selection is the node selector of a pod template as key=value terms: the gates it waits for.
func selection(ds *unstructured.Unstructured) string {
	var terms []string
	sel, _, _ := unstructured.NestedStringMap(ds.Object, "spec", "template", "spec", "nodeSelector")
	for _, k := range slices.Sorted(maps.Keys(sel)) {
		terms = append(terms, k+"="+sel[k])
	}
	nst, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms")
	for i, t := range nst {
		m, _ := t.(map[string]any)
		exprs, _, _ := unstructured.NestedSlice(m, "matchExpressions")
		var parts []string
		for _, e := range exprs {
			em, _ := e.(map[string]any)
			k, _, _ := unstructured.NestedString(em, "key")
			op, _, _ := unstructured.NestedString(em, "operator")
			vals, _, _ := unstructured.NestedStringSlice(em, "values")
			switch {
			case op == "In" && len(vals) == 1:
				parts = append(parts, k+"="+vals[0])
			case op == "Exists" || op == "DoesNotExist":
				parts = append(parts, k+" "+op)
			default:
				parts = append(parts, k+" "+op+" ["+strings.Join(vals, ",")+"]")
			}
		}
		if len(nst) > 1 {
			terms = append(terms, fmt.Sprintf("term %d: %s", i+1, strings.Join(parts, ", ")))
		} else {
			terms = append(terms, parts...)
		}
	}
	return strings.Join(terms, ", ")
}

// configMapsOf lists "namespace/name" of the ConfigMaps a pod template mounts.
func configMapsOf(ds *unstructured.Unstructured) []string {
	vols, _, _ := unstructured.NestedSlice(ds.Object, "spec", "template", "spec", "volumes")
	var out []string
	for _, v := range vols {
		m, _ := v.(map[string]any)
		if n, ok, _ := unstructured.NestedString(m, "configMap", "name"); ok {
			out = append(out, ds.GetNamespace()+"/"+n)
		}
	}
	return out
}

// hoistShared moves the field changes that at least sharedAt objects make identically out of
// each object into one list; an object left with no field of its own keeps its effect. The
// config hash stays with each DaemonSet: the same hash in several of them is a coincidence of
// what they mount, and it is what explains their restart.
func hoistShared(changes []ObjectChange) []SharedChange {
	count := map[FieldChange]int{}
	for _, c := range changes {
		for _, f := range c.Fields {
			if f.Path != hashPath {
				count[f]++
			}
		}
	}
	var shared []SharedChange
	for f, n := range count {
		if n >= sharedAt {
			shared = append(shared, SharedChange{FieldChange: f, Objects: n})
		}
	}
	if len(shared) == 0 {
		return nil
	}
	slices.SortFunc(shared, func(a, b SharedChange) int {
		return strings.Compare(a.Path+"\x00"+a.From+"\x00"+a.To, b.Path+"\x00"+b.From+"\x00"+b.To)
	})
	for i := range changes {
		changes[i].Fields = slices.DeleteFunc(changes[i].Fields, func(f FieldChange) bool { return count[f] >= sharedAt })
	}
	return shared
}
