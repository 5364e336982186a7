package render

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
)

// matches evaluates required node affinity terms against node labels like the scheduler:
// any term, all requirements of it.
func matches(terms []corev1.NodeSelectorTerm, node map[string]string) bool {
	for _, term := range terms {
		ok := true
		for _, r := range term.MatchExpressions {
			has := labels.Set(node).Has(r.Key)
			val := node[r.Key]
			in := false
			for _, v := range r.Values {
				in = in || (has && v == val)
			}
			switch r.Operator {
			case corev1.NodeSelectorOpIn:
				ok = ok && in
			case corev1.NodeSelectorOpNotIn:
				ok = ok && !in
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// TestExclusionTerms: the device plugin for the rest lands on exactly the GPU nodes that no
// pool selects, including pools selected by several labels.
func TestExclusionTerms(t *testing.T) {
	pools := []v1alpha1.NodePool{
		{Name: "a", NodeSelector: map[string]string{"pool": "a"}},
		{Name: "b", NodeSelector: map[string]string{"pool": "b", "zone": "x"}},
		{Name: "c", NodeSelector: map[string]string{"gen": "h100", "zone": "y"}},
	}
	base := []corev1.NodeSelectorRequirement{{Key: "gpu", Operator: corev1.NodeSelectorOpIn, Values: []string{"true"}}}
	terms, err := exclusionTerms(base, pointers(pools))
	if err != nil {
		t.Fatal(err)
	}
	inPool := func(node map[string]string) bool {
		for _, p := range pools {
			if labels.SelectorFromSet(p.NodeSelector).Matches(labels.Set(node)) {
				return true
			}
		}
		return false
	}
	values := map[string][]string{"pool": {"", "a", "b"}, "zone": {"", "x", "y"}, "gen": {"", "h100"}, "gpu": {"", "true"}}
	count := 0
	for _, pool := range values["pool"] {
		for _, zone := range values["zone"] {
			for _, gen := range values["gen"] {
				for _, gpu := range values["gpu"] {
					node := map[string]string{}
					for k, v := range map[string]string{"pool": pool, "zone": zone, "gen": gen, "gpu": gpu} {
						if v != "" {
							node[k] = v
						}
					}
					want := gpu == "true" && !inPool(node)
					if got := matches(terms, node); got != want {
						t.Errorf("node %v: rest device plugin placed=%v, want %v", node, got, want)
					}
					count++
				}
			}
		}
	}
	if count != 36 {
		t.Fatalf("enumerated %d nodes", count)
	}
}

func TestExclusionTermsBounded(t *testing.T) {
	var pools []v1alpha1.NodePool
	for i := 0; i < 7; i++ {
		pools = append(pools, v1alpha1.NodePool{Name: string(rune('a' + i)), NodeSelector: map[string]string{"x": string(rune('a' + i)), "y": "1"}})
	}
	if _, err := exclusionTerms(nil, pointers(pools)); err == nil {
		t.Fatal("2^7 terms must be refused with a field error")
	} else if fe, ok := err.(v1alpha1.FieldErrors); !ok || fe[0].Field != "spec.nodePools" {
		t.Fatalf("want a FieldErrors on spec.nodePools, got %v", err)
	}
}

func pointers(pools []v1alpha1.NodePool) []*v1alpha1.NodePool {
	out := make([]*v1alpha1.NodePool, len(pools))
	for i := range pools {
		out[i] = &pools[i]
	}
	return out
}
