package pipeline_test

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpupolicy/gpupolicy/fn/pipeline"
	"github.com/gpupolicy/gpupolicy/fn/validate"
)

// today pins the lifecycle checks to the date the matrix facts were reviewed.
var today = time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)

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

// TestDecodeErrorsBecomeResults: every decoding problem is an error result at its field, and
// apiVersion and kind get the exact line to write.
func TestDecodeErrorsBecomeResults(t *testing.T) {
	p, res := pipeline.Validate([]byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\nspec: {bogus: 1}\n"), validate.Options{Now: today})
	if p != nil {
		t.Fatal("a policy that did not decode must be nil")
	}
	for _, w := range []struct{ field, msg string }{
		{"apiVersion", "write apiVersion: gpupolicy.dev/v1alpha1"},
		{"kind", "write kind: GPUPolicy"},
		{"spec.bogus", `unknown field "bogus"`},
	} {
		if !slices.ContainsFunc(res, func(r validate.Result) bool {
			return r.Severity == validate.SeverityError && r.Field == w.field && strings.Contains(r.Message, w.msg)
		}) {
			t.Errorf("missing error at %s containing %q in:\n%s", w.field, w.msg, res.Text(""))
		}
	}
}
