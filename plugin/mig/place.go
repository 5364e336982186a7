package mig

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Placement is one GPU instance at its memory-slice offset.
type Placement struct {
	Profile string
	Start   int
	Size    int // memory slices
}

// Fit finds a placement for counts (profile name → instances) on one GPU whose profiles are
// given, or says in words why none exists: an unknown profile, more instances of a profile
// than the GPU holds, more compute or memory slices than it has, or no arrangement of the
// profiles' placements that does not overlap. The result is ordered by start.
func Fit(profiles []Profile, counts map[string]int) ([]Placement, error) {
	var want []Profile
	compute, memory := 0, 0
	for _, name := range slices.Sorted(maps.Keys(counts)) {
		n := counts[name]
		i := slices.IndexFunc(profiles, func(p Profile) bool { return p.Name == name })
		if i < 0 {
			return nil, fmt.Errorf("profile %s does not exist on this GPU (it has %s)", name, strings.Join(names(profiles), ", "))
		}
		p := profiles[i]
		if n > p.Max {
			return nil, fmt.Errorf("%d × %s is more than the %d instances of %s one GPU holds", n, name, p.Max, name)
		}
		for range n {
			want = append(want, p)
		}
		compute += n * p.Compute
		memory += n * p.Memory
	}
	if compute > ComputeSlices {
		return nil, fmt.Errorf("%s takes %d compute slices; one GPU has %d", describe(counts), compute, ComputeSlices)
	}
	if memory > MemorySlices {
		return nil, fmt.Errorf("%s takes %d memory slices; one GPU has %d", describe(counts), memory, MemorySlices)
	}
	// Largest first: they have the fewest placements, so the search backtracks least.
	slices.SortStableFunc(want, func(a, b Profile) int {
		return cmp.Or(cmp.Compare(b.Memory, a.Memory), cmp.Compare(len(a.Starts), len(b.Starts)))
	})
	out := make([]Placement, len(want))
	if !place(want, 0, 0, out) {
		return nil, fmt.Errorf("%s has no valid placement on one GPU: the instances' allowed positions overlap", describe(counts))
	}
	slices.SortFunc(out, func(a, b Placement) int { return cmp.Compare(a.Start, b.Start) })
	return out, nil
}

// place assigns want[i:] to free memory slices (used is a bit set of the taken ones).
func place(want []Profile, i int, used uint, out []Placement) bool {
	if i == len(want) {
		return true
	}
	p := want[i]
	for _, s := range p.Starts {
		mask := (uint(1)<<p.Memory - 1) << s
		if s+p.Memory > MemorySlices || used&mask != 0 {
			continue
		}
		out[i] = Placement{Profile: p.Name, Start: s, Size: p.Memory}
		if place(want, i+1, used|mask, out) {
			return true
		}
	}
	return false
}

func names(ps []Profile) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Name
	}
	return out
}

// describe writes counts as "2 × 3g.40gb + 1 × 1g.10gb", sorted by name.
func describe(counts map[string]int) string {
	var parts []string
	for _, n := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%d × %s", counts[n], n))
	}
	return strings.Join(parts, " + ")
}
