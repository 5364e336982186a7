package validate_test

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/fn/pipeline"
	"github.com/gpupolicy/gpupolicy/fn/validate"
)

// TestDeadSettings generates, from every row of v1alpha1.Effects, a policy that sets the
// field where it takes effect (no error may name it) and one per Dead context (it must be
// refused, naming the field, the condition and the fix). Nothing may be rendered from the
// second.
func TestDeadSettings(t *testing.T) {
	cases := 0
	for _, e := range v1alpha1.Effects {
		live := effectPolicy(t, e, "")
		t.Run(e.Field+"/live", func(t *testing.T) {
			if r, ok := resultAt(load(t, live), concrete(e.Field)); ok && strings.Contains(r.Message, "does nothing") {
				t.Fatalf("refused where it takes effect:\n%s\n%s", live, r.Message)
			}
		})
		for i, dead := range e.Dead {
			cases++
			doc := effectPolicy(t, e, dead)
			t.Run(fmt.Sprintf("%s/dead%d", e.Field, i), func(t *testing.T) {
				res := load(t, doc)
				r, ok := resultAt(res, concrete(e.Field))
				if !ok || r.Severity != validate.SeverityError || !strings.Contains(r.Message, "does nothing") ||
					!strings.Contains(r.Message, e.When) || !strings.Contains(r.Message, e.Fix) {
					t.Fatalf("not refused at %s:\n%s\ngot:\n%s", concrete(e.Field), doc, res.Text(""))
				}
				if _, objs, res := pipeline.Load([]byte(doc), validate.Options{Now: today}); !res.HasErrors() || len(objs) > 0 {
					t.Fatalf("rendered %d objects from a refused policy", len(objs))
				}
			})
		}
		if e.Off != nil {
			off := effectPolicyValue(t, e, e.Dead[0], e.Off)
			t.Run(e.Field+"/off", func(t *testing.T) {
				if r, ok := resultAt(load(t, off), concrete(e.Field)); ok && strings.Contains(r.Message, "does nothing") {
					t.Fatalf("the value that asks for nothing (%v) was refused:\n%s", e.Off, r.Message)
				}
			})
		}
	}
	t.Logf("%d rows, %d dead combinations", len(v1alpha1.Effects), cases)
}

// TestEffectsNameRealFields keeps the table's paths, examples and contexts honest: a typo in a
// path would make its row match nothing and refuse nothing.
func TestEffectsNameRealFields(t *testing.T) {
	seen := map[string]bool{}
	for _, e := range v1alpha1.Effects {
		if _, err := v1alpha1.FieldType(e.Field); err != nil {
			t.Errorf("%v", err)
		}
		if seen[e.Field] {
			t.Errorf("%s has two rows", e.Field)
		}
		seen[e.Field] = true
		if e.Example == "" || len(e.Dead) == 0 || e.When == "" || e.Fix == "" || e.Live == nil {
			t.Errorf("%s: every row needs When, Fix, Live, Example and at least one Dead context", e.Field)
		}
	}
}

// TestEveryFieldIsClassified walks every field of the spec: each either has a row in
// v1alpha1.Effects or is listed here as always taking effect, with the reason. A new field
// fails until someone decides which.
func TestEveryFieldIsClassified(t *testing.T) {
	always := map[string]string{
		"spec.namespace": "", "spec.kubernetesVersion": "", "spec.gitops": "", "spec.allocation": "",
		"spec.registry":         "rewrites at least images.gpupolicy",
		"spec.imagePullSecrets": "", "spec.nodeSelector": "", "spec.tolerations": "", "spec.priorityClassName": "",
		"spec.containerRuntime": "the toolkit stage always writes the drop-in",
		"spec.driver.source":    "", "spec.driver.version": "the nodes outside every pool always run spec.driver",
		"spec.driver.enforce":                         "the nodes outside every pool always run spec.driver",
		"spec.driver.kernelModuleType":                "the driver container loads it; the agents check a preinstalled driver's flavour against it",
		"spec.driver.upgrade.maxUnavailable":          "(inside spec.driver.upgrade)",
		"spec.driver.upgrade.drain.enabled":           "(inside spec.driver.upgrade)",
		"spec.driver.upgrade.waitForJobs.podSelector": "(inside spec.driver.upgrade)",
		"spec.cuda":           "",
		"spec.toolkit.source": "", "spec.toolkit.version": "the version matrix checks the preinstalled toolkit's features by it",
		"spec.toolkit.runtimeClassName": "", "spec.toolkit.setAsDefault": "", "spec.toolkit.cdi": "",
		"spec.toolkit.resources": "the install container runs for either source", "spec.toolkit.updateStrategy": "",
		"spec.devicePlugin.healthChecks.enabled": "the DRA plugin reads it too",
		"spec.devicePlugin.resources":            "the DRA plugin's container takes them too",
		"spec.devicePlugin.updateStrategy":       "the DRA plugin's DaemonSet takes it too",
		"spec.featureDiscovery.enabled":          "", "spec.exporter.enabled": "",
		"spec.nodePools[*].name": "", "spec.nodePools[*].nodeSelector": "", "spec.nodePools[*].allocation": "",
		"spec.nodePools[*].mig":                               "the agent applies layouts under either allocation",
		"spec.nodePools[*].driver.version":                    "",
		"spec.nodePools[*].driver.source":                     "",
		"spec.nodePools[*].driver.enforce":                    "",
		"spec.nodePools[*].driver.kernelModuleType":           "as spec.driver.kernelModuleType, for the pool's driver stage",
		"spec.nodePools[*].devicePlugin.healthChecks.enabled": "the DRA plugin reads it too",
		"spec.nodePools[*].devicePlugin.resources":            "the DRA plugin's container takes them too",
		"spec.nodePools[*].devicePlugin.updateStrategy":       "the DRA plugin's DaemonSet takes it too",
		"spec.guardrails":                                     "", "spec.images": "",
	}
	rows := map[string]bool{}
	for _, e := range v1alpha1.Effects {
		rows[e.Field] = true
	}
	var walk func(path string, typ reflect.Type)
	walk = func(path string, typ reflect.Type) {
		if _, ok := always[path]; ok || rows[path] {
			return
		}
		for typ.Kind() == reflect.Pointer {
			typ = typ.Elem()
		}
		if typ.Kind() != reflect.Struct || typ.PkgPath() != reflect.TypeOf(v1alpha1.Spec{}).PkgPath() {
			t.Errorf("%s is neither in v1alpha1.Effects nor listed as always taking effect: classify it", path)
			return
		}
		for i := 0; i < typ.NumField(); i++ {
			name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			ft := typ.Field(i).Type
			if ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct && ft.Elem().PkgPath() == typ.PkgPath() {
				walk(path+"."+name+"[*]", ft.Elem())
				continue
			}
			walk(path+"."+name, ft)
		}
	}
	walk("spec", reflect.TypeOf(v1alpha1.Spec{}))
}

// effectPolicy is the minimal policy with e.Context, then dead, merged in and e.Example set at
// e.Field (pool 0 for [*]).
func effectPolicy(t *testing.T, e v1alpha1.Effect, dead string) string {
	var v any
	if err := yaml.Unmarshal([]byte(e.Example), &v); err != nil {
		t.Fatalf("%s: example %q: %v", e.Field, e.Example, err)
	}
	return effectPolicyValue(t, e, dead, v)
}

func effectPolicyValue(t *testing.T, e v1alpha1.Effect, dead string, value any) string {
	t.Helper()
	doc := map[string]any{}
	if err := yaml.Unmarshal([]byte(base), &doc); err != nil {
		t.Fatal(err)
	}
	spec := doc["spec"].(map[string]any)
	for _, frag := range []string{e.Context, dead} {
		m := map[string]any{}
		if err := yaml.Unmarshal([]byte(frag), &m); err != nil {
			t.Fatalf("%s: fragment %q: %v", e.Field, frag, err)
		}
		merge(spec, m)
	}
	setAt(doc, strings.Split(concrete(e.Field), "."), value)
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// merge deep-merges src into dst: maps key by key, lists element by element.
func merge(dst, src map[string]any) {
	for k, v := range src {
		dst[k] = mergeValue(dst[k], v)
	}
}

func mergeValue(dst, src any) any {
	switch s := src.(type) {
	case map[string]any:
		if d, ok := dst.(map[string]any); ok {
			merge(d, s)
			return d
		}
	case []any:
		if d, ok := dst.([]any); ok {
			for i, v := range s {
				if i < len(d) {
					d[i] = mergeValue(d[i], v)
				} else {
					d = append(d, v)
				}
			}
			return d
		}
	}
	return src
}

// setAt sets value at a path such as spec.nodePools[0].driver.image, creating maps on the way.
func setAt(m map[string]any, parts []string, value any) {
	name, idx, list := strings.Cut(parts[0], "[")
	if len(parts) == 1 && !list {
		m[name] = value
		return
	}
	if !list {
		next, _ := m[name].(map[string]any)
		if next == nil {
			next = map[string]any{}
			m[name] = next
		}
		setAt(next, parts[1:], value)
		return
	}
	i, _ := strconv.Atoi(strings.TrimSuffix(idx, "]"))
	items := m[name].([]any)
	setAt(items[i].(map[string]any), parts[1:], value)
}

func concrete(pattern string) string { return strings.ReplaceAll(pattern, "[*]", "[0]") }

func resultAt(res validate.Results, path string) (validate.Result, bool) {
	for _, r := range res {
		if r.Field == path {
			return r, true
		}
	}
	return validate.Result{}, false
}
