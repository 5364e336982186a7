package doctor

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// maxChanges bounds the differing fields listed per object; the count says how many there were.
const maxChanges = 5

// compareObjects checks that every rendered object exists in the cluster and still carries every
// field the renderer set. Fields the API server or controllers add (defaults, status, managed
// metadata) are not differences: the rendered object must be a subset of the live one.
func (s *snapshot) compareObjects(ctx context.Context, rendered []*unstructured.Unstructured) error {
	if s.in.Objects == nil {
		return fmt.Errorf("comparing %s with the cluster needs a reader of its objects (Input.Objects)", s.in.Expected.Source)
	}
	objs := append([]*unstructured.Unstructured{}, rendered...)
	sort.SliceStable(objs, func(i, j int) bool { return objectKey(objs[i]) < objectKey(objs[j]) })
	mapper, undiscovered := s.in.Mapper, map[schema.GroupVersion]bool{}
	if mapper == nil {
		var err error
		if mapper, undiscovered, err = s.discover(ctx, objs); err != nil {
			return err
		}
	}
	for _, want := range objs {
		if localOnly(want) {
			continue
		}
		s.report.ObjectsRendered++
		if undiscovered[want.GroupVersionKind().GroupVersion()] {
			continue
		}
		f, checked, err := s.compareObject(ctx, mapper, want)
		if err != nil {
			return err
		}
		if checked {
			s.report.ObjectsChecked++
		}
		if f != nil {
			s.report.Objects = append(s.report.Objects, *f)
		}
	}
	return nil
}

// discover maps the kinds of the rendered objects to their resources from API discovery of
// just the group versions they use. A group version the cluster does not serve leaves its kinds
// unmapped (their objects are reported kind-not-served); one whose discovery failed otherwise
// is noted, and its objects are not compared.
func (s *snapshot) discover(ctx context.Context, objs []*unstructured.Unstructured) (meta.RESTMapper, map[schema.GroupVersion]bool, error) {
	mapper := meta.NewDefaultRESTMapper(nil)
	seen, failed := map[schema.GroupVersion]bool{}, map[schema.GroupVersion]bool{}
	for _, o := range objs {
		gv := o.GroupVersionKind().GroupVersion()
		if localOnly(o) || seen[gv] {
			continue
		}
		seen[gv] = true
		list, err := s.in.Cluster.APIResources(ctx, gv.String())
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			failed[gv] = true
			e := s.readErr("get", "API discovery ("+discoveryPath(gv)+")", "", "", err)
			if err := s.note(e, "its objects are not compared"); err != nil {
				return nil, nil, err
			}
			continue
		}
		for _, r := range list.APIResources {
			if strings.Contains(r.Name, "/") { // a subresource such as daemonsets/status
				continue
			}
			scope := meta.RESTScopeRoot
			if r.Namespaced {
				scope = meta.RESTScopeNamespace
			}
			singular := cmp.Or(r.SingularName, strings.ToLower(r.Kind))
			mapper.AddSpecific(gv.WithKind(r.Kind), gv.WithResource(r.Name), gv.WithResource(singular), scope)
		}
	}
	return mapper, failed, nil
}

// compareObject reads want back from the cluster. checked is false when RBAC hid it (a note
// says so); the finding is nil when the live object carries every rendered field.
func (s *snapshot) compareObject(ctx context.Context, mapper meta.RESTMapper, want *unstructured.Unstructured) (*ObjectFinding, bool, error) {
	f := &ObjectFinding{APIVersion: want.GetAPIVersion(), Kind: want.GetKind(), Namespace: want.GetNamespace(), Name: want.GetName()}
	gvk := want.GroupVersionKind()
	mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		f.Finding = Finding{Severity: SeverityError, Check: "kind-not-served",
			Message: fmt.Sprintf("the cluster does not serve %s %s (its CRD or API group is not installed)", gvk.GroupVersion(), gvk.Kind),
			Fix:     installHint(gvk.Group, gvk.Kind)}
		return f, true, nil
	} else if err != nil {
		return nil, false, err
	}
	namespace := ""
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		namespace = want.GetNamespace()
	}
	live, err := s.in.Objects.Get(ctx, mapping.Resource, namespace, want.GetName())
	switch {
	case apierrors.IsNotFound(err):
		f.Finding = Finding{Severity: SeverityError, Check: "object-missing",
			Message: fmt.Sprintf("%s %s is rendered but not in the cluster", want.GetKind(), objectName(want)),
			Fix:     "sync the rendered manifests (Argo CD / Flux), or kubectl apply the file that holds it"}
		return f, true, nil
	case err != nil:
		resource := mapping.Resource.GroupResource().String()
		return nil, false, s.note(s.readErr("get", resource, want.GetNamespace(), want.GetName(), err), "not compared")
	}
	changes := diffSubset(want.Object, live.Object)
	if len(changes) == 0 {
		return nil, true, nil
	}
	f.Finding = Finding{Severity: SeverityError, Check: "object-changed",
		Message: fmt.Sprintf("%s %s differs from the rendered object in %d field(s)", want.GetKind(), objectName(want), len(changes)),
		Fix:     "someone changed it outside git: re-sync from git, or move the change into the policy and re-render"}
	f.Changes = changes[:min(len(changes), maxChanges)]
	return f, true, nil
}

// localOnly: kustomize's own files and objects marked local-config never reach the cluster.
func localOnly(o *unstructured.Unstructured) bool {
	return strings.HasPrefix(o.GetAPIVersion(), "kustomize.config.k8s.io/") ||
		strings.HasPrefix(o.GetAPIVersion(), "config.kubernetes.io/") ||
		o.GetAnnotations()["config.kubernetes.io/local-config"] == "true"
}

func objectKey(o *unstructured.Unstructured) string {
	return o.GroupVersionKind().GroupKind().String() + "/" + o.GetNamespace() + "/" + o.GetName()
}

func objectName(o *unstructured.Unstructured) string {
	if o.GetNamespace() == "" {
		return o.GetName()
	}
	return o.GetNamespace() + "/" + o.GetName()
}

// pathKey writes a map key as a path step; label-style keys (dots, slashes) get brackets so
// the path stays unambiguous: .metadata.labels["app.kubernetes.io/name"].
func pathKey(k string) string {
	if strings.ContainsAny(k, "./ ") {
		return fmt.Sprintf("[%q]", k)
	}
	return "." + k
}

// installHint names what serves a kind the cluster lacks.
func installHint(group, kind string) string {
	switch group {
	case "monitoring.coreos.com":
		return "install the Prometheus Operator CRDs (" + kind + " is one), or set spec.exporter.serviceMonitor: false in the policy"
	case "kustomize.toolkit.fluxcd.io", "source.toolkit.fluxcd.io":
		return "install Flux (flux install), or render with spec.gitops other than flux"
	}
	return "install the CRD or enable the API group that serves " + kind + " (" + group + "), or turn the feature off in the policy"
}

// ignoredField is what the API server manages or the KRM pipeline adds for itself.
func ignoredField(path string) bool {
	switch {
	case path == ".status", strings.HasPrefix(path, ".status."):
		return true
	case strings.HasPrefix(path, ".metadata."):
		rest := strings.TrimPrefix(path, ".metadata.")
		if rest == "labels" || rest == "annotations" {
			return false
		}
		if a, ok := strings.CutPrefix(rest, "annotations"); ok {
			return strings.HasPrefix(a, `["internal.config.kubernetes.io/`) || strings.HasPrefix(a, `["config.kubernetes.io/`)
		}
		return !strings.HasPrefix(rest, "labels")
	}
	return false
}

// diffSubset lists the fields of want that live lacks or holds with another value, as
// "path: want X, have Y", in sorted path order.
func diffSubset(want, live map[string]any) []string {
	var out []string
	walkSubset("", want, live, &out)
	return out
}

func walkSubset(path string, want, live any, out *[]string) {
	if ignoredField(path) {
		return
	}
	switch w := want.(type) {
	case map[string]any:
		l, ok := live.(map[string]any)
		if !ok {
			*out = append(*out, fmt.Sprintf("%s: want an object, have %s", pathOrRoot(path), show(live)))
			return
		}
		for _, k := range slices.Sorted(maps.Keys(w)) {
			sub := path + pathKey(k)
			lv, present := l[k]
			if _, isMap := w[k].(map[string]any); !present && isMap {
				lv, present = map[string]any{}, true // report the missing leaves, minus the ignored ones
			}
			if !present {
				if !ignoredField(sub) && !emptyValue(w[k]) {
					*out = append(*out, fmt.Sprintf("%s: want %s, have nothing", sub, show(w[k])))
				}
				continue
			}
			walkSubset(sub, w[k], lv, out)
		}
	case []any:
		l, ok := live.([]any)
		if !ok || len(l) != len(w) {
			*out = append(*out, fmt.Sprintf("%s: want %d item(s), have %s", pathOrRoot(path), len(w), show(live)))
			return
		}
		for i := range w {
			walkSubset(fmt.Sprintf("%s[%d]", path, i), w[i], l[i], out)
		}
	default:
		if !sameScalar(want, live) {
			*out = append(*out, fmt.Sprintf("%s: want %s, have %s", pathOrRoot(path), show(want), show(live)))
		}
	}
}

// emptyValue: an empty map or list in the rendered object is equivalent to an absent field,
// which is how the API server stores it.
func emptyValue(v any) bool {
	switch t := v.(type) {
	case map[string]any:
		return len(t) == 0
	case []any:
		return len(t) == 0
	case nil:
		return true
	}
	return false
}

// sameScalar compares scalars by their JSON text, so 1 (int64 from YAML) equals 1 (float64 or
// int64 from the API server).
func sameScalar(a, b any) bool {
	return show(a) == show(b)
}

func show(v any) string {
	if v == nil {
		return "nothing"
	}
	if f, ok := v.(float64); ok && f == float64(int64(f)) {
		v = int64(f)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	s := string(b)
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}

func pathOrRoot(p string) string { return cmp.Or(p, ".") }
