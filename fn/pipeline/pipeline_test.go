package pipeline_test

import (
	"os"
	"strings"
	"testing"

	"github.com/gpupolicy/gpupolicy/fn/pipeline"
	"github.com/gpupolicy/gpupolicy/fn/validate"
)

func policy(t *testing.T) string {
	b, err := os.ReadFile("../render/testdata/pools/policy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestLoadRenders(t *testing.T) {
	p, objs, res := pipeline.Load([]byte(policy(t)), validate.Options{})
	if res.HasErrors() || p == nil || len(objs) == 0 {
		t.Fatalf("policy %v, %d objects, results:\n%s", p != nil, len(objs), res.Text(""))
	}
}

// TestValidationErrorsStopRendering: no objects when validation fails.
func TestValidationErrorsStopRendering(t *testing.T) {
	_, objs, res := pipeline.Load([]byte(strings.Replace(policy(t), "gpupolicy.dev/v1alpha1", "gpupolicy.dev/v1", 1)), validate.Options{})
	if !res.HasErrors() || objs != nil {
		t.Fatalf("want errors and no objects, got %d objects", len(objs))
	}
}

// TestRenderErrorsBecomeResults: what only rendering can see (a pool name too long for the
// label values it becomes) is an error result with the field path, and no objects.
func TestRenderErrorsBecomeResults(t *testing.T) {
	long := strings.Repeat("x", 50)
	_, objs, res := pipeline.Load([]byte(strings.Replace(policy(t), "name: inference", "name: "+long, 1)), validate.Options{})
	if objs != nil || !res.HasErrors() {
		t.Fatalf("want an error, got %d objects:\n%s", len(objs), res.Text(""))
	}
	found := false
	for _, r := range res {
		found = found || (r.Severity == validate.SeverityError && r.Field == "spec.nodePools[0].name")
	}
	if !found {
		t.Fatalf("no error on spec.nodePools[0].name:\n%s", res.Text(""))
	}
}
