package examples

import (
	"os"
	"reflect"
	"testing"
	"time"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/fn/pipeline"
	"github.com/gpupolicy/gpupolicy/fn/validate"
)

// examplePolicies are the GPUPolicies of the examples; all must be valid.
var examplePolicies = []string{
	"kustomize/gpupolicy.yaml",
	"argocd/gpu-stack/gpupolicy.yaml",
	"flux/gpupolicy.yaml",
}

func loadPolicy(t *testing.T, path string) *v1alpha1.GPUPolicy {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	p, res := pipeline.Validate(data, validate.Options{Now: time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)})
	if res.HasErrors() {
		t.Fatal(res.Text(path))
	}
	return p
}

func TestExamplePoliciesValid(t *testing.T) {
	for _, path := range examplePolicies {
		loadPolicy(t, path)
	}
}

// TestExamplesDescribeOneFleet: the Argo CD and Flux examples render the same fleet as the
// kustomize example; only the exec path (Argo CD) and the ordering metadata (Flux) differ, so a
// change to one example must be made to all.
func TestExamplesDescribeOneFleet(t *testing.T) {
	base := loadPolicy(t, "kustomize/gpupolicy.yaml").Spec
	argo := loadPolicy(t, "argocd/gpu-stack/gpupolicy.yaml").Spec
	if !reflect.DeepEqual(base, argo) {
		t.Error("argocd/gpu-stack/gpupolicy.yaml and kustomize/gpupolicy.yaml differ in spec")
	}
	flux := loadPolicy(t, "flux/gpupolicy.yaml").Spec
	flux.GitOps = base.GitOps
	if !reflect.DeepEqual(base, flux) {
		t.Error("flux/gpupolicy.yaml and kustomize/gpupolicy.yaml differ in spec beyond gitops")
	}
}
