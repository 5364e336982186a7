package krm

import (
	"testing"

	"github.com/kptdev/krm-functions-sdk/go/fn"

	"github.com/gpupolicy/gpupolicy/fn/validate"
)

func TestKRMResultsCarryFieldResourceAndFile(t *testing.T) {
	obj, err := fn.ParseKubeObject([]byte(`apiVersion: gpupolicy.dev/v1alpha1
kind: GPUPolicy
metadata:
  name: fleet
  annotations:
    internal.config.kubernetes.io/path: policies/fleet.yaml
    internal.config.kubernetes.io/index: "2"
spec: {}
`))
	if err != nil {
		t.Fatal(err)
	}
	res := validate.Results{
		{Severity: validate.SeverityWarning, Field: "spec.a", Message: "w"},
		{Severity: validate.SeverityError, Field: "spec.exporter.port", Value: 80, Message: "e"},
	}
	out := results(res, sourceOf(obj))
	if len(out) != 2 || out.ExitCode() != 1 {
		t.Fatalf("got %v", out)
	}
	e := out[0]
	if e.Severity != fn.Error || e.Field.Path != "spec.exporter.port" || e.Field.CurrentValue != 80 ||
		e.ResourceRef.Kind != "GPUPolicy" || e.ResourceRef.Name != "fleet" || e.File.Path != "policies/fleet.yaml" || e.File.Index != 2 {
		t.Fatalf("error result = %+v %+v %+v %+v", e, e.Field, e.ResourceRef, e.File)
	}
}
