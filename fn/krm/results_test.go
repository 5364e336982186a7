package krm

import (
	"testing"

	yaml "go.yaml.in/yaml/v3"

	"github.com/gpupolicy/gpupolicy/fn/validate"
)

func TestKRMResultsCarryFieldResourceAndFile(t *testing.T) {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(`apiVersion: gpupolicy.dev/v1alpha1
kind: GPUPolicy
metadata:
  name: fleet
  namespace: gpu
  annotations:
    internal.config.kubernetes.io/path: policies/fleet.yaml
    internal.config.kubernetes.io/index: "2"
spec: {}
`), &doc); err != nil {
		t.Fatal(err)
	}
	res := validate.Results{
		{Severity: validate.SeverityWarning, Field: "spec.a", Message: "w"},
		{Severity: validate.SeverityError, Field: "spec.exporter.port", Value: 80, Message: "e"},
	}
	out := results(res, sourceOf(object{doc.Content[0]}))
	if len(out) != 2 {
		t.Fatalf("got %v", out)
	}
	e := out[0]
	if e.Severity != "error" || e.Field.Path != "spec.exporter.port" || e.Field.CurrentValue != 80 ||
		e.ResourceRef.Kind != "GPUPolicy" || e.ResourceRef.Name != "fleet" || e.ResourceRef.Namespace != "gpu" ||
		e.File.Path != "policies/fleet.yaml" || e.File.Index != 2 {
		t.Fatalf("error result = %+v %+v %+v %+v", e, e.Field, e.ResourceRef, e.File)
	}
	if got, want := e.String(), "[error] gpupolicy.dev/v1alpha1/GPUPolicy/gpu/fleet spec.exporter.port: e"; got != want {
		t.Fatalf("String() = %q, want %q (kpt's format)", got, want)
	}
}
