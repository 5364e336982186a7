package validate

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/mig"
)

// mig checks a pool's MIG layouts: the model, the layout names (label values, since a node
// picks one with nvidia.com/mig.config), every group's devices and profiles, and that the
// pool's migStrategy can advertise what the layouts create.
func (c *checker) mig(np *v1alpha1.NodePool, pool *field.Path) {
	m := np.MIG
	p := pool.Child("mig")
	var product *mig.Product
	if m.GPUProduct != "" {
		if pr, ok := mig.Products[m.GPUProduct]; ok {
			product = &pr
		} else {
			c.errorf(p.Child("gpuProduct"), m.GPUProduct, "%q is not a MIG-capable GPU model this function knows (known: %s): use the node's nvidia.com/gpu.product label value of one of them, or remove gpuProduct to check only the profile names and the slices of one GPU",
				m.GPUProduct, strings.Join(mig.ProductNames(), ", "))
		}
	}
	if sel := np.NodeSelector[config.LabelGPUProduct]; product == nil && m.GPUProduct == "" {
		// The pool selects one model: its layouts are checked against it as if gpuProduct said so.
		if pr, ok := mig.Products[sel]; ok {
			product = &pr
		}
	}
	lp := p.Child("layouts")
	if len(m.Layouts) == 0 {
		c.errorf(lp, nil, "declares no layout: add one, e.g. all-1g.10gb: [{devices: all, profiles: {\"1g.10gb\": 7}}], or remove mig")
		return
	}
	names := slices.Sorted(maps.Keys(m.Layouts))
	switch layout := m.GetLayout(); {
	case layout == "":
		c.errorf(p.Child("layout"), nil, "is required when a pool declares more than one layout: name the pool's layout, one of %s", quoteList(names))
	case m.Layouts[layout] == nil:
		c.errorf(p.Child("layout"), layout, "%q is not a declared layout: use one of %s, or declare it under layouts", layout, quoteList(names))
	}
	for _, name := range names {
		kp := lp.Key(name)
		if errs := validation.IsValidLabelValue(name); len(errs) > 0 || name == "" {
			c.errorf(kp, name, "layout name %q is not a valid label value (nodes select it with the label %s=<name>): use letters, digits, '-', '_' and '.', at most 63 characters", name, config.LabelMIGConfig)
			continue
		}
		c.migLayout(m.Layouts[name], product, kp)
		if np.Allocation != v1alpha1.AllocationDRA { // the DRA plugin publishes every MIG device as it is
			c.migStrategy(name, m.Layouts[name], np.DevicePlugin.MIGStrategy, pool.Child("devicePlugin", "migStrategy"))
		}
	}
}

// migLayout checks one layout's groups: devices unique and not shared between groups, MIG
// mode consistent with profiles, and each GPU's profiles on one GPU.
func (c *checker) migLayout(groups []v1alpha1.MIGDeviceGroup, product *mig.Product, p *field.Path) {
	if len(groups) == 0 {
		c.errorf(p, nil, "is empty: list at least one group, e.g. {devices: all, profiles: {\"1g.10gb\": 7}}")
		return
	}
	owner := map[int]int{} // GPU index → group
	for j := range groups {
		g := &groups[j]
		gp := p.Index(j)
		dp := gp.Child("devices")
		switch {
		case g.Devices.All:
			if len(groups) > 1 {
				c.errorf(dp, v1alpha1.MIGDevicesAll, "\"all\" covers every GPU, so this layout's other groups would overlap it: use \"all\" in a layout's only group, or list GPU indexes")
			}
		case len(g.Devices.Indexes) == 0:
			c.errorf(dp, nil, "is required: write \"all\" or a list of GPU indexes, e.g. [0, 1, 2, 3]")
		}
		for k, idx := range g.Devices.Indexes {
			if o, seen := owner[idx]; seen {
				if o == j {
					c.errorf(dp.Index(k), idx, "GPU %d is listed twice in this group: remove the duplicate", idx)
				} else {
					c.errorf(dp.Index(k), idx, "GPU %d is already in group %d of this layout: a GPU gets one configuration, remove it from one of the groups", idx, o)
				}
				continue
			}
			owner[idx] = j
		}
		c.migGroup(g, product, gp)
	}
}

func (c *checker) migGroup(g *v1alpha1.MIGDeviceGroup, product *mig.Product, p *field.Path) {
	pp := p.Child("profiles")
	if !g.GetMIGEnabled() {
		if len(g.Profiles) > 0 {
			c.errorf(p.Child("migEnabled"), false, "is false but the group lists profiles: MIG devices need MIG mode; set migEnabled: true or remove profiles")
		}
		return
	}
	ok := true
	compute := 0
	for _, name := range slices.Sorted(maps.Keys(g.Profiles)) {
		n := g.Profiles[name]
		pn, err := mig.ParseProfile(name)
		if err != nil {
			c.errorf(pp.Key(name), name, "%s", err)
			ok = false
			continue
		}
		if n < 1 {
			c.errorf(pp.Key(name), n, "%d instances of %s: a count is at least 1; remove the profile to create none", n, name)
			ok = false
			continue
		}
		compute += n * pn.Compute
		if product != nil {
			if _, known := product.Profile(name); !known {
				c.errorf(pp.Key(name), name, "%s has no profile %s: its profiles are %s", product.Name, name, strings.Join(product.ProfileNames(), ", "))
				ok = false
			}
		}
	}
	switch {
	case !ok:
	case product != nil:
		// Fit names the first limit a count passes: the model's instances of a profile, its
		// compute or memory slices, or the placements.
		if _, err := mig.Fit(product.Profiles, g.Profiles); err != nil {
			c.errorf(pp, g.Profiles, "does not fit one %s: %s; see the model's profiles in the GPUPolicy reference (MIG)", product.Name, err)
		}
	case compute > mig.ComputeSlices:
		c.errorf(pp, g.Profiles, "takes %d compute slices per GPU; a GPU has %d: use fewer or smaller profiles", compute, mig.ComputeSlices)
	}
}

// migStrategy checks that the pool's device plugin advertises the layout's devices: none
// advertises whole GPUs only (a MIG GPU would advertise nothing), single needs one profile on
// every GPU (it advertises them as the pool's resourceName).
func (c *checker) migStrategy(name string, groups []v1alpha1.MIGDeviceGroup, strategy string, sp *field.Path) {
	profiles := map[string]bool{}
	enabled, disabled := false, false
	for _, g := range groups {
		if g.GetMIGEnabled() {
			enabled = true
		} else {
			disabled = true
		}
		for p := range g.Profiles {
			profiles[p] = true
		}
	}
	switch {
	case strategy == config.MIGNone && enabled:
		c.errorf(sp, strategy, "is none but layout %q enables MIG: the device plugin would advertise neither the MIG devices nor the GPUs; set migStrategy: mixed (one resource per profile) or single (one profile everywhere)", name)
	case strategy == config.MIGSingle && (len(profiles) > 1 || enabled && disabled):
		c.errorf(sp, strategy, "is single but layout %q has %s: single advertises one kind of device on the whole node; use one profile on every GPU, or migStrategy: mixed", name, describeProfiles(profiles, enabled && disabled))
	}
}

func describeProfiles(profiles map[string]bool, partly bool) string {
	var parts []string
	if len(profiles) > 1 {
		parts = append(parts, fmt.Sprintf("profiles %s", strings.Join(slices.Sorted(maps.Keys(profiles)), ", ")))
	}
	if partly {
		parts = append(parts, "GPUs with and without MIG")
	}
	return strings.Join(parts, " and ")
}
