package validate

import (
	"regexp"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// Architectures under gpu-feature-discovery's family names (label nvidia.com/gpu.family), with
// the first driver branch that runs them and whether any of their data-center models has MIG.
// Sources: the CUDA release notes' driver table (CUDA 11.0 added Ampere with R450, 11.8 Hopper
// and Ada Lovelace with R520, 12.8 Blackwell with R570:
// https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/) and the MIG user guide's supported
// GPUs (A100, A30, H100, H200, B200 and their variants:
// https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-gpus.html).
//
// modules says which kernel modules the architecture runs: NVIDIA's open GPU kernel modules
// support Turing and later, and Blackwell supports only them (the driver installation guide's
// "open GPU kernel modules" section: https://docs.nvidia.com/datacenter/tesla/driver-installation-guide/).
var architectures = map[string]struct {
	minBranch int
	mig       bool
	modules   string // "" both, else the only kernelModuleType it runs
}{
	"kepler":       {modules: v1alpha1.KernelModulesProprietary},
	"maxwell":      {modules: v1alpha1.KernelModulesProprietary},
	"pascal":       {modules: v1alpha1.KernelModulesProprietary},
	"volta":        {modules: v1alpha1.KernelModulesProprietary},
	"turing":       {},
	"ampere":       {minBranch: 450, mig: true},
	"ada-lovelace": {minBranch: 520},
	"hopper":       {minBranch: 520, mig: true},
	"blackwell":    {minBranch: 570, mig: true, modules: v1alpha1.KernelModulesOpen},
}

// graceHopper is the Grace Hopper superchip, a Hopper that, like Blackwell, runs only the open
// kernel modules.
var graceHopper = regexp.MustCompile(`(^|-)GH200(-|$)`)

// productFamilies maps a product label (nvidia.com/gpu.product, NVML's name with '-' for
// spaces) to its family by model number, first match wins; migModels are the MIG-capable
// models among them. A product no pattern knows is left unchecked.
var (
	productFamilies = []struct {
		re     *regexp.Regexp
		family string
	}{
		{regexp.MustCompile(`(^|-)(G?B[23]00|RTX-PRO-[0-9]+-Blackwell)`), "blackwell"},
		{regexp.MustCompile(`(^|-)(G?H[12]00|H[28]0|H800)(-|$)`), "hopper"},
		{regexp.MustCompile(`(^|-)(L4|L40S?|L20|RTX-[0-9]+-Ada)(-|$)`), "ada-lovelace"},
		{regexp.MustCompile(`(^|-)(A100|A30|A800|A40|A10G?|A16|A2|RTX-A[0-9]+)(-|$)`), "ampere"},
		{regexp.MustCompile(`(^|-)(T4|Quadro-RTX-[0-9]+)(-|$)`), "turing"},
		{regexp.MustCompile(`(^|-)V100(-|$)`), "volta"},
		{regexp.MustCompile(`(^|-)(P100|P40|P4)(-|$)`), "pascal"},
	}
	migModels = regexp.MustCompile(`(^|-)(A100|A30|A800|G?H[12]00|H[28]0|H800|G?B[23]00)(-|$)`)
)

// productFamily is the family of a product label, "" when unknown.
func productFamily(product string) string {
	product = strings.TrimSuffix(product, sharedMark)
	for _, pf := range productFamilies {
		if pf.re.MatchString(product) {
			return pf.family
		}
	}
	return ""
}

// sharedMark ends the product label of a time-sliced GPU whose resource keeps the default name
// (gpu-feature-discovery's "-SHARED").
const sharedMark = "-SHARED"

// poolSelection checks what a pool sets against the nodes its nodeSelector can select: the
// feature labels name a GPU model, family or MIG capability its MIG layouts or driver cannot
// serve, or a sharing label the pool's own settings rewrite, so that the node would leave the
// pool as soon as the settings apply.
func (c *checker) poolSelection(s *v1alpha1.Spec, np *v1alpha1.NodePool, ip *field.Path) {
	sel, sp := np.NodeSelector, ip.Child("nodeSelector")
	product, family := sel[config.LabelGPUProduct], sel[config.LabelGPUFamily]
	if family == "" {
		family = productFamily(product)
	}
	if np.MIG != nil && migEnabled(np.MIG) {
		c.migSelection(np, sel, sp, ip.Child("mig"), product, family)
	}
	if a, ok := architectures[family]; ok && a.minBranch > 0 {
		d, _ := s.PoolDriver(np)
		if v, err := config.CheckDriverVersion(d.Version); err == nil && v.Branch() < a.minBranch {
			where, at := "spec.driver.version", ip.Child("driver", "version")
			if np.Driver == nil || np.Driver.Version == "" {
				at = sp.Key(selectedBy(sel))
			} else {
				where = at.String()
			}
			c.errorf(at, d.Version, "the pool selects %s GPUs (%s), which need driver branch R%d or later, but its driver is %s (%s): give the pool a newer driver (driver.version), or select other nodes",
				family, selection(sel), a.minBranch, d.Version, where)
		}
	}
	c.moduleSelection(s, np, ip, sel, product, family)
	if np.Allocation != v1alpha1.AllocationDRA {
		c.sharingSelection(np.DevicePlugin, sel, sp)
	}
}

// moduleSelection: the pool's kernelModuleType must be one its GPUs can load.
func (c *checker) moduleSelection(s *v1alpha1.Spec, np *v1alpha1.NodePool, ip *field.Path, sel map[string]string, product, family string) {
	only := architectures[family].modules
	name := family
	if graceHopper.MatchString(product) {
		only, name = v1alpha1.KernelModulesOpen, "Grace Hopper"
	}
	d, _ := s.PoolDriver(np)
	if only == "" || d.KernelModuleType == v1alpha1.KernelModulesAuto || d.KernelModuleType == only {
		return
	}
	at := ip.Child("driver", "kernelModuleType")
	where := at.String()
	if np.Driver == nil || np.Driver.KernelModuleType == "" {
		at, where = ip.Child("nodeSelector").Key(selectedBy(sel)), "spec.driver.kernelModuleType"
	}
	why := "which run only NVIDIA's open kernel modules"
	if only == v1alpha1.KernelModulesProprietary {
		why = "which the open kernel modules do not support (Turing and later do)"
	}
	c.errorf(at, d.KernelModuleType, "the pool selects %s GPUs (%s), %s, but its driver's kernelModuleType is %s (%s): set the pool's driver.kernelModuleType to %s or auto, or select other nodes",
		name, selection(sel), why, d.KernelModuleType, where, only)
}

// selectedBy is the selector key that names the model: product over family.
func selectedBy(sel map[string]string) string {
	if _, ok := sel[config.LabelGPUFamily]; ok {
		return config.LabelGPUFamily
	}
	return config.LabelGPUProduct
}

func selection(sel map[string]string) string {
	k := selectedBy(sel)
	return k + "=" + sel[k]
}

// hasNoMIG reports whether family is a known architecture without MIG.
func hasNoMIG(family string) bool {
	a, ok := architectures[family]
	return ok && !a.mig
}

func migEnabled(m *v1alpha1.MIG) bool {
	for _, groups := range m.Layouts {
		for i := range groups {
			if groups[i].GetMIGEnabled() {
				return true
			}
		}
	}
	return false
}

// migSelection: MIG layouts need GPUs with MIG, of the model gpuProduct names, and no more
// GPUs than nvidia.com/gpu.count says the nodes have.
func (c *checker) migSelection(np *v1alpha1.NodePool, sel map[string]string, sp, mp *field.Path, product, family string) {
	m := np.MIG
	switch {
	case sel[config.LabelMIGCapable] == "false":
		c.errorf(sp.Key(config.LabelMIGCapable), "false", "the pool selects GPUs without MIG, yet declares MIG layouts that enable it: the layouts could never apply; remove %s: \"false\" or the MIG layouts", config.LabelMIGCapable)
	case hasNoMIG(family):
		c.errorf(sp.Key(selectedBy(sel)), sel[selectedBy(sel)], "the pool selects %s GPUs (%s), which have no MIG, yet declares MIG layouts that enable it: select an A100, A30, H100, H200 or B200 pool, or remove mig", family, selection(sel))
	case product != "" && productFamily(product) != "" && !migModels.MatchString(strings.TrimSuffix(product, sharedMark)):
		c.errorf(sp.Key(config.LabelGPUProduct), product, "%s has no MIG, yet the pool declares MIG layouts that enable it: select a MIG-capable model (A100, A30, H100, H200, B200) or remove mig", product)
	}
	if m.GPUProduct != "" {
		if product != "" && product != m.GPUProduct {
			c.errorf(mp.Child("gpuProduct"), m.GPUProduct, "the layouts are checked for %s, but the pool's nodeSelector picks %s=%s, another model: the agent would refuse every layout on those nodes; make gpuProduct and the selected product the same",
				m.GPUProduct, config.LabelGPUProduct, product)
		} else if f := productFamily(m.GPUProduct); family != "" && f != "" && f != family {
			c.errorf(mp.Child("gpuProduct"), m.GPUProduct, "%s is a %s GPU, but the pool's nodeSelector picks %s=%s: no selected node has this model; make them agree",
				m.GPUProduct, f, config.LabelGPUFamily, sel[config.LabelGPUFamily])
		}
	}
	if n, err := strconv.Atoi(sel[config.LabelGPUCount]); err == nil {
		for _, name := range sortedLayouts(m) {
			for j, g := range m.Layouts[name] {
				for k, idx := range g.Devices.Indexes {
					if idx >= n {
						c.errorf(mp.Child("layouts").Key(name).Index(j).Child("devices").Index(k), idx, "GPU %d does not exist on the selected nodes: the pool's nodeSelector picks %s=%d (GPUs 0–%d); use an index below %d or \"all\"",
							idx, config.LabelGPUCount, n, n-1, n)
					}
				}
			}
		}
	}
}

func sortedLayouts(m *v1alpha1.MIG) []string {
	out := make([]string, 0, len(m.Layouts))
	for k := range m.Layouts {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// sharingSelection refuses a selector on a label the pool's own device plugin settings decide
// (gpu-feature-discovery writes them from the same configuration): a value other than the one
// the settings produce selects nodes only until feature discovery relabels them, and then the
// node leaves the pool and its settings — a pool that empties itself.
func (c *checker) sharingSelection(dp *v1alpha1.DevicePlugin, sel map[string]string, sp *field.Path) {
	replicas := dp.Sharing.TimeSlicing.GetReplicas()
	strategy := config.SharingNone
	if replicas > 1 {
		strategy = config.SharingTimeSlicing
	}
	if m := dp.Sharing.GetMPS(); m.GetReplicas() > 1 {
		strategy, replicas = config.SharingMPS, m.GetReplicas()
	}
	flips := func(label, want string) {
		got, ok := sel[label]
		if !ok || got == want {
			return
		}
		if want == "" {
			c.errorf(sp.Key(label), got, "feature discovery writes no %s for this pool (its devicePlugin.migStrategy is none), so no node would ever be selected: remove the key, or select on a label a person sets (e.g. gpupolicy.dev/pool)", label)
			return
		}
		c.errorf(sp.Key(label), got, "feature discovery writes %s=%s on this pool's nodes, from the pool's own device plugin settings: a node selected with %q leaves the pool as soon as they apply; select on a label a person sets (e.g. gpupolicy.dev/pool), or drop the key",
			label, want, got)
	}
	flips(config.LabelGPUReplicas, strconv.Itoa(replicas))
	flips(config.LabelGPUSharingStrategy, strategy)
	migStrategy := dp.MIGStrategy
	if migStrategy == config.MIGNone {
		migStrategy = ""
	}
	flips(config.LabelMIGStrategy, migStrategy)
	if product, ok := sel[config.LabelGPUProduct]; ok {
		marked := strategy != config.SharingNone && dp.ResourceName == config.DefaultResourceName
		switch {
		case marked && !strings.HasSuffix(product, sharedMark):
			c.errorf(sp.Key(config.LabelGPUProduct), product, "the pool shares its GPUs (%s) under the default resource name, so feature discovery writes %s=%s%s on its nodes, and a node selected by %q leaves the pool as soon as sharing applies: set a resourceName of your own (e.g. \"nvidia.com/gpu.shared\", which keeps the product label as it is), or select on a label a person sets",
				strategy, config.LabelGPUProduct, product, sharedMark, product)
		case !marked && strings.HasSuffix(product, sharedMark):
			c.errorf(sp.Key(config.LabelGPUProduct), product, "feature discovery adds %s only to a GPU shared (time-slicing or MPS) under the default resource name, which this pool's settings are not: select %q", sharedMark, strings.TrimSuffix(product, sharedMark))
		}
	}
}
