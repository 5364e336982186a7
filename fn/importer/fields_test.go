package importer

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	nvidiav1 "github.com/NVIDIA/gpu-operator/api/nvidia/v1"
	nvidiav1alpha1 "github.com/NVIDIA/gpu-operator/api/nvidia/v1alpha1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// fill sets every field of v (recursively): every pointer allocated, every slice and map
// given one element, every scalar a non-zero value, so a walk of its JSON meets every field
// NVIDIA's type defines.
func fill(v reflect.Value, depth int) {
	if depth > 12 {
		return
	}
	switch v.Interface().(type) {
	case intstr.IntOrString:
		v.Set(reflect.ValueOf(intstr.FromString("25%")))
		return
	case resource.Quantity:
		v.Set(reflect.ValueOf(resource.MustParse("1")))
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem(), depth+1)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), depth+1)
			}
		}
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0), depth+1)
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k := reflect.New(v.Type().Key()).Elem()
		fill(k, depth+1)
		e := reflect.New(v.Type().Elem()).Elem()
		fill(e, depth+1)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.String:
		v.SetString("x1")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Uint, reflect.Uint32, reflect.Uint64:
		v.SetUint(1)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1)
	}
}

func specOf(t *testing.T, obj any) map[string]any {
	t.Helper()
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m["spec"].(map[string]any)
}

// Every field NVIDIA's ClusterPolicy and NVIDIADriver define is either read by the mapping or
// has its own reason in the table: a field added in a new operator version (or a reason
// removed) fails here with its path, never reaches a user as "not known".
func TestEveryOperatorFieldIsMappedOrExplained(t *testing.T) {
	var cp nvidiav1.ClusterPolicy
	fill(reflect.ValueOf(&cp.Spec).Elem(), 0)
	cp.Name, cp.Kind = "filled", "ClusterPolicy"
	cp.Spec.Driver.UseNvidiaDriverCRD = new(bool) // the ClusterPolicy's own driver fields are read
	var nd nvidiav1alpha1.NVIDIADriver
	fill(reflect.ValueOf(&nd.Spec).Elem(), 0)
	nd.Name, nd.Kind = "filled", "NVIDIADriver"
	for _, tc := range []struct {
		name string
		in   Input
	}{
		{"ClusterPolicy, driver container", Input{ClusterPolicies: []Object[nvidiav1.ClusterPolicy]{{Typed: cp, Spec: specOf(t, cp)}}}},
		{"NVIDIADriver", Input{NVIDIADrivers: []Object[nvidiav1alpha1.NVIDIADriver]{{Typed: nd, Spec: specOf(t, nd)}}}},
	} {
		r, _ := run(&tc.in, Options{KubernetesVersion: "1.34", ContainerdVersion: "2.1", DriverVersion: "580.95.05", CUDAVersion: "12.8"})
		if len(r.Unmapped) == 0 {
			t.Fatalf("%s: a filled object reports nothing: the walk is broken", tc.name)
		}
		for _, u := range r.Unmapped {
			if strings.HasPrefix(u.Reason, "not known") {
				t.Errorf("%s: %s (%s) is neither mapped nor explained: map it in importer.go or give it a reason in reasons.go", tc.name, u.Path, u.Values)
			}
		}
	}
	// Patterns that match nothing are stale reasons.
	for kind, table := range reasons {
		if kind == "DevicePluginConfig" {
			continue
		}
		var typ reflect.Type = reflect.TypeOf(nvidiav1.ClusterPolicySpec{})
		if kind == "NVIDIADriver" {
			typ = reflect.TypeOf(nvidiav1alpha1.NVIDIADriverSpec{})
		}
		for pat := range table {
			if !typeHasPath(typ, strings.Split(pat, ".")) {
				t.Errorf("%s reason %q names no field of %s", kind, pat, typ)
			}
		}
	}
}

func typeHasPath(t reflect.Type, segs []string) bool {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	if len(segs) == 0 {
		return true
	}
	if t.Kind() != reflect.Struct {
		return false
	}
	for i := range t.NumField() {
		f := t.Field(i)
		name := strings.Split(f.Tag.Get("json"), ",")[0]
		if name == "" && f.Anonymous {
			if typeHasPath(f.Type, segs) {
				return true
			}
			continue
		}
		if name == segs[0] || segs[0] == "*" {
			if typeHasPath(f.Type, segs[1:]) {
				return true
			}
		}
	}
	return false
}
