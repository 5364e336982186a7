package labels

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpupolicy/gpupolicy/plugin/config"
	"github.com/gpupolicy/gpupolicy/plugin/nodefacts"
)

// shapeLabels are the per-profile labels under prefix ("nvidia.com/gpu" for single,
// "nvidia.com/mig-<profile>" for mixed).
func shapeLabels(out map[string]string, prefix string, a nvml.DeviceAttributes) {
	u := func(v uint32) string { return strconv.FormatUint(uint64(v), 10) }
	out[prefix+".memory"] = strconv.FormatUint(a.MemorySizeMB, 10)
	out[prefix+".multiprocessors"] = u(a.MultiprocessorCount)
	out[prefix+".slices.gi"] = u(a.GpuInstanceSliceCount)
	out[prefix+".slices.ci"] = u(a.ComputeInstanceSliceCount)
	out[prefix+".engines.copy"] = u(a.SharedCopyEngineCount)
	out[prefix+".engines.decoder"] = u(a.SharedDecoderCount)
	out[prefix+".engines.encoder"] = u(a.SharedEncoderCount)
	out[prefix+".engines.jpeg"] = u(a.SharedJpegCount)
	out[prefix+".engines.ofa"] = u(a.SharedOfaCount)
}

// resource is one advertised resource's labels under prefix (nvidia.com/gpu, or
// nvidia.com/mig-<profile> under the mixed strategy), gpu-feature-discovery's base labels.
type resource struct {
	product  string // product label before the shared suffix
	count    int
	replicas int // 0: the resource is not shared at all (GPUs in MIG mode as whole GPUs)
	strategy string
	marked   bool // shared and not renamed: the product says -SHARED
}

func (r resource) write(out map[string]string, prefix string) {
	strategy, product := config.SharingNone, r.product
	if r.replicas > 1 {
		strategy = r.strategy
		if r.marked {
			product += sharedSuffix
		}
	}
	out[prefix+".product"] = config.ProductLabel(product)
	out[prefix+".count"] = strconv.Itoa(r.count)
	out[prefix+".replicas"] = strconv.Itoa(r.replicas)
	out[prefix+".sharing-strategy"] = strategy
}

// resourceLabels writes the product, count, replicas and sharing labels of what the device
// plugin advertises under dp, with the MIG strategy's labels, as gpu-feature-discovery does:
//   - whole GPUs: shared by dp's replicas, except that GPUs in MIG mode count as unshared
//     (replicas 0) when no GPU is outside MIG mode. A shared GPU's product ends in -SHARED
//     unless the resource has a name of its own (GFD's rename: a resourceName other than
//     nvidia.com/gpu).
//   - single: every GPU in MIG mode with MIG devices of one profile, which then stand for
//     nvidia.com/gpu (product <model>-MIG-<profile>, shape labels); any other MIG layout
//     is <model>-MIG-INVALID with count, replicas and memory 0. No GPU in MIG mode: whole GPUs.
//   - mixed: each profile is its own resource nvidia.com/mig-<profile>, shared by dp's
//     replicas like every resource the plugin advertises, and never renamed.
func resourceLabels(gpus []nodefacts.GPU, dp config.DevicePlugin, out map[string]string) error {
	strategy, replicas := dp.Sharing.Strategy()
	renamed := dp.ResourceName != "" && dp.ResourceName != config.DefaultResourceName
	migStrategy := cmp.Or(dp.MIGStrategy, config.MIGNone)
	switch migStrategy {
	case config.MIGNone, config.MIGSingle, config.MIGMixed:
	default:
		return fmt.Errorf("devicePlugin.migStrategy %q is not none|single|mixed", migStrategy)
	}
	count := len(gpus)
	model := out[Product]
	anyMIG := slices.ContainsFunc(gpus, func(g nodefacts.GPU) bool { return g.MIGEnabled })
	allMIG := !slices.ContainsFunc(gpus, func(g nodefacts.GPU) bool { return !g.MIGEnabled })
	whole := resource{product: model, count: count, replicas: replicas, strategy: strategy, marked: !renamed}
	if allMIG {
		whole = resource{product: model, count: count}
	}
	whole.write(out, config.LabelGPUShapePrefix)
	out[MPSCapable] = strconv.FormatBool(strategy == config.SharingMPS && !anyMIG)
	if migStrategy == config.MIGNone {
		return nil
	}
	out[MIGStrategy] = migStrategy

	counts, attrs := map[string]int{}, map[string]nvml.DeviceAttributes{}
	for _, g := range gpus {
		for _, d := range g.MIG {
			counts[d.Profile]++
			attrs[d.Profile] = d.Attributes
		}
	}
	if migStrategy == config.MIGMixed {
		for _, n := range slices.Sorted(maps.Keys(counts)) {
			prefix := config.LabelMIGProfilePrefix + n
			resource{product: model + "-MIG-" + n, count: counts[n], replicas: replicas, strategy: strategy, marked: true}.write(out, prefix)
			shapeLabels(out, prefix, attrs[n])
		}
		return nil
	}
	if !anyMIG {
		return nil // single, but no GPU in MIG mode: the whole-GPU labels stand
	}
	if !allMIG || len(counts) != 1 || slices.ContainsFunc(gpus, func(g nodefacts.GPU) bool { return len(g.MIG) == 0 }) {
		resource{product: model + "-MIG-INVALID"}.write(out, config.LabelGPUShapePrefix)
		out[config.LabelGPUSharingStrategy], out[Memory] = "", "0"
		return nil
	}
	for n, c := range counts {
		resource{product: model + "-MIG-" + n, count: c, replicas: replicas, strategy: strategy, marked: !renamed}.write(out, config.LabelGPUShapePrefix)
		shapeLabels(out, config.LabelGPUShapePrefix, attrs[n])
	}
	return nil
}

// owned reports whether key is a feature label this package writes, so a label it no
// longer computes (a MIG profile that was removed) can be deleted without touching the
// gates, the driver labels or anything a person set.
func owned(key string) bool { return config.IsFeatureLabel(key) }

// WithRemovals returns computed plus "" (remove) for every owned label the node carries
// that computed no longer has.
func WithRemovals(nodeLabels, computed map[string]string) map[string]string {
	out := make(map[string]string, len(computed))
	for k, v := range computed {
		out[k] = v
	}
	for k := range nodeLabels {
		if _, ok := computed[k]; !ok && owned(k) {
			out[k] = ""
		}
	}
	return out
}
