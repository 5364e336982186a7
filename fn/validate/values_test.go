package validate_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/fn/validate"
)

// TestResourceUnitSlips generates, for every resources field of the API (found by reflection,
// so a new component's resources are covered without an edit here), the unit slips that parse
// but mean nonsense, and a sane twin that must pass.
func TestResourceUnitSlips(t *testing.T) {
	var fields []string
	var walk func(path string, typ reflect.Type)
	walk = func(path string, typ reflect.Type) {
		for typ.Kind() == reflect.Pointer {
			typ = typ.Elem()
		}
		if typ == reflect.TypeOf(corev1.ResourceRequirements{}) {
			fields = append(fields, path)
			return
		}
		if typ.Kind() == reflect.Slice && typ.Elem().PkgPath() == reflect.TypeOf(v1alpha1.Spec{}).PkgPath() {
			walk(path+"[0]", typ.Elem())
			return
		}
		if typ.Kind() != reflect.Struct || typ.PkgPath() != reflect.TypeOf(v1alpha1.Spec{}).PkgPath() {
			return
		}
		for i := 0; i < typ.NumField(); i++ {
			name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			walk(path+"."+name, typ.Field(i).Type)
		}
	}
	walk("spec", reflect.TypeOf(v1alpha1.Spec{}))
	if len(fields) < 5 {
		t.Fatalf("found only %v", fields)
	}
	slips := []struct {
		part, name, value, msg string
	}{
		{"limits", "memory", "256m", "'m' means milli, not mega"},
		{"requests", "memory", `"128"`, "a number without a unit is bytes"},
		{"limits", "memory", "256Gi", "check the unit"},
		{"requests", "cpu", `"100"`, "millicores are written with 'm'"},
		{"requests", "cpu", `"0.0001"`, "below 1m"},
		{"limits", "ephemeral-storage", "512m", "'m' means milli"},
	}
	cases := 0
	for _, f := range fields {
		for _, s := range slips {
			cases++
			res := load(t, resourcesPolicy(f, fmt.Sprintf("{%s: {%s: %s}}", s.part, s.name, s.value)))
			at := fmt.Sprintf("%s.%s[%s]", f, s.part, s.name)
			if !has(res, want{validate.SeverityError, at, s.msg}) {
				t.Errorf("%s = %s: want error containing %q, got:\n%s", at, s.value, s.msg, res.Text(""))
			}
		}
		sane := resourcesPolicy(f, "{requests: {cpu: 20m, memory: 64Mi, ephemeral-storage: 0}, limits: {memory: 256Mi, ephemeral-storage: 1Gi}}")
		if res := load(t, sane); res.HasErrors() {
			t.Errorf("%s: sane resources refused:\n%s", f, res.Text(""))
		}
	}
	t.Logf("%d resources fields, %d generated slips", len(fields), cases)
}

// resourcesPolicy sets value at the resources field path (spec.nodePools[0]... adds a pool).
func resourcesPolicy(path, value string) string {
	doc := base
	rel := strings.TrimPrefix(path, "spec.")
	if pool, ok := strings.CutPrefix(rel, "nodePools[0]."); ok {
		return doc + "  nodePools:\n  - name: a\n    nodeSelector: {pool: a}\n" + nest("    ", strings.Split(pool, "."), value)
	}
	return doc + nest("  ", strings.Split(rel, "."), value)
}

func nest(indent string, parts []string, value string) string {
	if len(parts) == 1 {
		return indent + parts[0] + ": " + value + "\n"
	}
	return indent + parts[0] + ":\n" + nest(indent+"  ", parts[1:], value)
}

// TestImageReferenceMistakes: every image field against the mistakes the reference parser
// (github.com/distribution/reference) and the digest rule catch.
func TestImageReferenceMistakes(t *testing.T) {
	const digest = "sha256:4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945"
	container := strings.Replace(base, `driver: {version: "580.95.05"}`, `driver: {version: "580.95.05", source: container, image: %q}`, 1)
	fields := []struct{ path, doc, good string }{
		{"spec.images.gpupolicy", base + "  images: {gpupolicy: %q}\n", "ghcr.io/gpupolicy/gpupolicy:v0.1.0@" + digest},
		{"spec.driver.image", container, "registry.example.com/nvidia/driver"},
		{"spec.toolkit.image", base + "  toolkit: {image: %q}\n", "registry.example.com/nvidia/container-toolkit"},
		{"spec.nodePools[0].driver.image", base + "  nodePools: [{name: a, nodeSelector: {pool: a}, driver: {source: container, image: %q}}]\n", "registry.example.com/a/driver"},
	}
	mistakes := []struct{ value, msg string }{
		{digest, "is a digest alone"},
		{"nvcr.io/NVIDIA/driver", "must be lower case"},
		{"nvcr.io/nvidia/driver@sha256:0123abcd", "is not sha256:<64 lower-case hex digits>"},
		{"nvcr.io/nvidia/driver@sha512:" + strings.Repeat("a", 128), "is not sha256:<64 lower-case hex digits>"},
		{"nvcr.io//driver", "is not an image"},
	}
	for _, f := range fields {
		set := func(v string) string { return fmt.Sprintf(f.doc, v) }
		for _, m := range mistakes {
			res := load(t, set(m.value))
			if !has(res, want{validate.SeverityError, f.path, m.msg}) {
				t.Errorf("%s = %s: want error containing %q, got:\n%s", f.path, m.value, m.msg, res.Text(""))
			}
		}
		if res := load(t, set(f.good)); res.HasErrors() {
			t.Errorf("%s = %s refused:\n%s", f.path, f.good, res.Text(""))
		}
	}
}
