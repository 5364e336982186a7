package render

import (
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// maxExclusionTerms bounds the node affinity of the device plugin for the nodes outside every
// pool. Excluding a pool selected by several labels is an OR of NotIn terms, and the terms of
// all such pools multiply; beyond this the scheduler would evaluate a huge affinity per node.
const maxExclusionTerms = 64

// placement says which GPU nodes a DaemonSet runs on.
type placement struct {
	gate string            // stage label that must be "true"; "" for the entry stage
	pool map[string]string // node pool selector the node must match
	// exclude keeps the DaemonSet off these node pools (the device plugin for the rest: every
	// pool; the default driver stage: the pools with their own driver).
	exclude []*v1alpha1.NodePool
	// everyLinuxNode ignores the entry selector: for discovery, which sets the entry label.
	everyLinuxNode bool
}

// nodeAffinity is the entry selector AND the stage gate AND the placement, as required node
// affinity (nodeSelector cannot say NotIn).
func (c *plan) nodeAffinity(pl placement) (*corev1.Affinity, error) {
	base := matchIn(c.p.Spec.NodeSelector)
	if pl.gate != "" {
		// The GPU Operator sets the same gate labels on the nodes it manages: a gated stage
		// stays off them until they are handed over (plugin/config.Operator).
		base = append(base,
			corev1.NodeSelectorRequirement{Key: pl.gate, Operator: corev1.NodeSelectorOpIn, Values: []string{config.GateOpen}},
			corev1.NodeSelectorRequirement{Key: config.LabelOperatorValidator, Operator: corev1.NodeSelectorOpDoesNotExist})
	}
	base = append(base, matchIn(pl.pool)...)
	terms := []corev1.NodeSelectorTerm{{MatchExpressions: base}}
	if len(pl.exclude) > 0 {
		var err error
		if terms, err = exclusionTerms(base, pl.exclude); err != nil {
			return nil, err
		}
	}
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms},
	}}, nil
}

// matchIn turns a selector into In requirements, sorted by key.
func matchIn(sel map[string]string) []corev1.NodeSelectorRequirement {
	out := make([]corev1.NodeSelectorRequirement, 0, len(sel))
	for _, k := range slices.Sorted(maps.Keys(sel)) {
		out = append(out, corev1.NodeSelectorRequirement{Key: k, Operator: corev1.NodeSelectorOpIn, Values: []string{sel[k]}})
	}
	return out
}

// exclusionTerms returns base AND NOT(pool) for every pool, in disjunctive normal form.
// A node is in a pool when it has every label of its selector, so it is outside when any one
// label differs: key NotIn [value] (which a node without the key also satisfies). Pools with
// one label add one requirement to every term (merged per key: key NotIn [v1, v2]); a pool
// with n labels multiplies the terms by n.
func exclusionTerms(base []corev1.NodeSelectorRequirement, pools []*v1alpha1.NodePool) ([]corev1.NodeSelectorTerm, error) {
	single := map[string][]string{}
	var multi []map[string]string
	for _, np := range pools {
		switch len(np.NodeSelector) {
		case 0:
			// validation rejects an empty pool selector; it would take every node.
		case 1:
			for k, v := range np.NodeSelector {
				if !slices.Contains(single[k], v) {
					single[k] = append(single[k], v)
				}
			}
		default:
			multi = append(multi, np.NodeSelector)
		}
	}
	common := slices.Clone(base)
	for _, k := range slices.Sorted(maps.Keys(single)) {
		vals := slices.Clone(single[k])
		slices.Sort(vals)
		common = append(common, corev1.NodeSelectorRequirement{Key: k, Operator: corev1.NodeSelectorOpNotIn, Values: vals})
	}
	terms := [][]corev1.NodeSelectorRequirement{common}
	for _, sel := range multi {
		if len(terms)*len(sel) > maxExclusionTerms {
			return nil, v1alpha1.FieldErrors{field.Invalid(field.NewPath("spec", "nodePools"), len(multi), fmt.Sprintf(
				"excluding %d node pools that each select on several labels from the default device plugin needs more than %d node affinity terms: give each pool one label that tells it apart (for example nvidia.com/gpu.pool: <name>)",
				len(multi), maxExclusionTerms))}
		}
		var next [][]corev1.NodeSelectorRequirement
		for _, t := range terms {
			for _, k := range slices.Sorted(maps.Keys(sel)) {
				next = append(next, withNotIn(t, k, sel[k]))
			}
		}
		terms = next
	}
	out := make([]corev1.NodeSelectorTerm, len(terms))
	for i, t := range terms {
		out[i] = corev1.NodeSelectorTerm{MatchExpressions: t}
	}
	return out, nil
}

// withNotIn returns a copy of term that also requires key NotIn [value], merged into the
// term's NotIn requirement on key if it has one.
func withNotIn(term []corev1.NodeSelectorRequirement, key, value string) []corev1.NodeSelectorRequirement {
	out := slices.Clone(term)
	for i, r := range out {
		if r.Key == key && r.Operator == corev1.NodeSelectorOpNotIn {
			if !slices.Contains(r.Values, value) {
				r.Values = append(slices.Clone(r.Values), value)
				slices.Sort(r.Values)
			}
			out[i] = r
			return out
		}
	}
	return append(out, corev1.NodeSelectorRequirement{Key: key, Operator: corev1.NodeSelectorOpNotIn, Values: []string{value}})
}
