// Package mig is the MIG knowledge the function and the node agent share: profile names, the
// supported profiles of each GPU model (a data table with its source), the mig-parted layout
// file the function renders and the agent reads, and the placement search that decides
// whether a set of GPU instances fits one GPU. It has no NVML in it: the function runs where
// no GPU is, and the agent feeds it what NVML reports.
package mig

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"sync"
)

// Slices of one GPU: 7 compute slices and 8 memory slices on every MIG-capable model of the
// table (NVIDIA MIG user guide, "Supported MIG Profiles"). A GPU instance takes a contiguous
// run of memory slices starting at one of its profile's placements.
const (
	ComputeSlices = 7
	MemorySlices  = 8
)

// Profile is one GPU-instance profile of a GPU model.
type Profile struct {
	Name    string // "1g.10gb", "1g.10gb+me"
	Compute int    // compute slices (the "<n>g")
	Memory  int    // memory slices the instance occupies
	Max     int    // most instances of this profile on one GPU
	Starts  []int  // memory-slice offsets where an instance may start
}

// Product is one GPU model by its gpu-feature-discovery product label (nvidia.com/gpu.product).
type Product struct {
	Name     string
	Profiles []Profile
}

// Profile returns the named profile of p.
func (p *Product) Profile(name string) (Profile, bool) {
	i := slices.IndexFunc(p.Profiles, func(pr Profile) bool { return pr.Name == name })
	if i < 0 {
		return Profile{}, false
	}
	return p.Profiles[i], true
}

// ProfileNames lists p's profile names in table order.
func (p *Product) ProfileNames() []string {
	out := make([]string, len(p.Profiles))
	for i, pr := range p.Profiles {
		out[i] = pr.Name
	}
	return out
}

// family builds the seven profiles every model of the table has, from its memory per
// fraction: 1g (1/8 of memory, 7 instances), 1g+me (one with the media engines), 1g with 2/8
// (4), 2g (2/8, 3), 3g (4/8, 2), 4g (4/8, 1), 7g (all, 1). Placements are those NVML reports
// on an A100 (`nvidia-smi mig -lgipp`), which the user guide's placement diagrams show for
// Hopper and Blackwell too.
func family(name string, gb1, gb2, gb4, gb8 int) Product {
	ones := []int{0, 1, 2, 3, 4, 5, 6}
	return Product{Name: name, Profiles: []Profile{
		{Name: fmt.Sprintf("1g.%dgb", gb1), Compute: 1, Memory: 1, Max: 7, Starts: ones},
		{Name: fmt.Sprintf("1g.%dgb+me", gb1), Compute: 1, Memory: 1, Max: 1, Starts: ones},
		{Name: fmt.Sprintf("1g.%dgb", gb2), Compute: 1, Memory: 2, Max: 4, Starts: []int{0, 2, 4, 6}},
		{Name: fmt.Sprintf("2g.%dgb", gb2), Compute: 2, Memory: 2, Max: 3, Starts: []int{0, 2, 4}},
		{Name: fmt.Sprintf("3g.%dgb", gb4), Compute: 3, Memory: 4, Max: 2, Starts: []int{0, 4}},
		{Name: fmt.Sprintf("4g.%dgb", gb4), Compute: 4, Memory: 4, Max: 1, Starts: []int{0}},
		{Name: fmt.Sprintf("7g.%dgb", gb8), Compute: 7, Memory: 8, Max: 1, Starts: []int{0}},
	}}
}

// Products are the MIG-capable models gpuProduct may name, keyed by their product label.
//
// Source: NVIDIA Multi-Instance GPU User Guide, "Supported MIG Profiles"
// (https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html) for
// the profile names, instance counts and memory fractions of A100 40GB/80GB, H100 80GB/94GB,
// H200 141GB and B200 180GB, and "Supported GPUs"
// (https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-gpus.html) for the
// models. The A100 40GB's 1g.10gb (2/8 of memory, R525 and later) is in the same table.
var Products = func() map[string]Product {
	out := map[string]Product{}
	add := func(base Product, names ...string) {
		for _, n := range names {
			p := base
			p.Name = n
			out[n] = p
		}
	}
	add(family("", 5, 10, 20, 40), "NVIDIA-A100-SXM4-40GB", "NVIDIA-A100-PCIE-40GB")
	add(family("", 10, 20, 40, 80), "NVIDIA-A100-SXM4-80GB", "NVIDIA-A100-80GB-PCIe", "NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-PCIe")
	add(family("", 12, 24, 47, 94), "NVIDIA-H100-NVL", "NVIDIA-H100-SXM5-94GB")
	add(family("", 18, 35, 71, 141), "NVIDIA-H200", "NVIDIA-H200-NVL")
	add(family("", 23, 45, 90, 180), "NVIDIA-B200")
	return out
}()

// ProductNames lists the keys of Products, sorted.
func ProductNames() []string {
	out := make([]string, 0, len(Products))
	for n := range Products {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// ProfileName is a parsed MIG profile name.
type ProfileName struct {
	Compute  int    // the "<n>g": compute slices of the GPU instance
	MemoryGB int    // the "<m>gb"
	Suffix   string // "", "+me", "+me.all", "-me" or "+gfx"
}

// profilePattern is "<n>g.<m>gb" with the suffixes NVML names (media engines included,
// all media engines, none, graphics). The compute-instance form "<c>c.<n>g.<m>gb" is not
// accepted: the agent creates one compute instance spanning each GPU instance, as
// mig-parted does for a plain profile. It is compiled on first use: gpupolicy-fn links this
// package for every policy, and only MIG policies read a profile name.
var profilePattern = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^([1-9])g\.([1-9][0-9]{0,3})gb(\+me|\+me\.all|-me|\+gfx)?$`)
})

// ParseProfile reads a profile name such as "1g.10gb" or "1g.10gb+me".
func ParseProfile(s string) (ProfileName, error) {
	m := profilePattern().FindStringSubmatch(s)
	if m == nil {
		return ProfileName{}, fmt.Errorf("%q is not a MIG profile name: write <slices>g.<memory>gb with an optional +me, +me.all, -me or +gfx, e.g. \"1g.10gb\" or \"3g.40gb\"", s)
	}
	c, _ := strconv.Atoi(m[1])
	gb, _ := strconv.Atoi(m[2])
	if c > ComputeSlices || c == 5 || c == 6 {
		return ProfileName{}, fmt.Errorf("%q has %d compute slices: MIG GPU instances have 1, 2, 3, 4 or 7", s, c)
	}
	return ProfileName{Compute: c, MemoryGB: gb, Suffix: m[3]}, nil
}
