package render

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
)

// TestGuardrailsCompareEveryNodeStatusField fails when k8s.io/api's NodeStatus gains a field
// the status rule does not compare: the agent could change it through nodes/status.
func TestGuardrailsCompareEveryNodeStatusField(t *testing.T) {
	known := map[string]bool{"conditions": true} // the rule on conditions covers this one
	for _, f := range nodeStatusFields {
		known[f.name] = true
	}
	typ := reflect.TypeFor[corev1.NodeStatus]()
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		if !known[name] {
			t.Errorf("NodeStatus.%s (json %q) is not in nodeStatusFields: add it with the Kubernetes minor that introduced it", typ.Field(i).Name, name)
		}
	}
}

// A field newer than the policy's Kubernetes minor stays out of the CEL (the API server would
// reject the whole policy); from that minor on it is compared.
func TestGuardrailsStatusFieldsFollowKubernetesVersion(t *testing.T) {
	fields := func(v string) []string {
		c := &plan{p: &v1alpha1.GPUPolicy{Spec: v1alpha1.Spec{KubernetesVersion: v}}}
		f, err := c.nodeStatusFields()
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	if f := fields("1.30"); slices.Contains(f, "features") || !slices.Contains(f, "capacity") {
		t.Errorf("1.30: %v", f)
	}
	if f := fields("1.34"); !slices.Contains(f, "features") || slices.Contains(f, "declaredFeatures") {
		t.Errorf("1.34: %v", f)
	}
	if f := fields("1.37"); !slices.Contains(f, "declaredFeatures") || slices.Contains(f, "conditions") {
		t.Errorf("1.37: %v", f)
	}
}

// TestGuardrailsCompareEveryNodeSpecField fails when NodeSpec gains a field the upgrade
// step's spec rule does not compare: the agent could change it while cordoning.
func TestGuardrailsCompareEveryNodeSpecField(t *testing.T) {
	known := map[string]bool{"unschedulable": true, "taints": true} // the upgrade step's own
	for _, f := range nodeSpecFields {
		known[f.name] = true
	}
	typ := reflect.TypeFor[corev1.NodeSpec]()
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		if !known[name] {
			t.Errorf("NodeSpec.%s (json %q) is not in nodeSpecFields: add it", typ.Field(i).Name, name)
		}
	}
}
