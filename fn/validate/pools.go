package validate

import (
	"cmp"
	"maps"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// devicePlugin checks device plugin settings. For a node pool, base is spec.devicePlugin:
// a pool inherits its values through defaulting, and an inherited mistake is reported once,
// at spec.devicePlugin, not again for every pool.
func (c *checker) devicePlugin(dp, base *v1alpha1.DevicePlugin, s *v1alpha1.Spec, p *field.Path) {
	own := func(v, inherited string) bool { return base == nil || v != inherited }
	var b v1alpha1.DevicePlugin
	if base != nil {
		b = *base
	}
	if own(dp.ResourceName, b.ResourceName) {
		c.resourceName(p.Child("resourceName"), dp.ResourceName)
	}
	if own(dp.MIGStrategy, b.MIGStrategy) {
		c.oneOf(p.Child("migStrategy"), dp.MIGStrategy, config.MIGNone, config.MIGSingle, config.MIGMixed)
	}
	if own(dp.DeviceListStrategy, b.DeviceListStrategy) &&
		c.oneOf(p.Child("deviceListStrategy"), dp.DeviceListStrategy, config.DeviceListCDICRI, config.DeviceListEnvVar) &&
		dp.DeviceListStrategy == config.DeviceListCDICRI && !v1alpha1.Bool(s.Toolkit.CDI) {
		c.errorf(p.Child("deviceListStrategy"), dp.DeviceListStrategy, "cdi-cri passes CDI device names, which need toolkit.cdi: true; set toolkit.cdi: true or deviceListStrategy: envvar")
	}
	if dp.Sharing != nil && dp.Sharing.TimeSlicing != nil {
		r := dp.Sharing.TimeSlicing.Replicas
		inherited := base != nil && base.Sharing != nil && base.Sharing.TimeSlicing != nil && base.Sharing.TimeSlicing.Replicas == r
		rp := p.Child("sharing", "timeSlicing", "replicas")
		switch {
		case inherited:
		case r < 1:
			c.errorf(rp, r, "replicas must be at least 1 (1 = no sharing): use 1 or more")
		case r > 64:
			c.warnf(rp, r, "%d replicas per GPU leaves each container a sliver of time and memory with no isolation; typical values are 2–8", r)
		}
		if r > 1 && dp.ResourceName == config.DefaultResourceName && (base == nil || !inherited) {
			c.infof(rp, r, "time-sliced replicas are advertised as %s, so a pod asking for one GPU cannot tell a shared slice from a whole GPU; a resourceName such as \"nvidia.com/gpu.shared\" makes the sharing visible", dp.ResourceName)
		}
	}
	if dp.HealthChecks != nil {
		c.xids(p.Child("healthChecks", "ignoredXIDs"), dp.HealthChecks.IgnoredXIDs, base)
	}
}

func (c *checker) resourceName(p *field.Path, name string) {
	domain, _, hasDomain := strings.Cut(name, "/")
	switch {
	case len(validation.IsQualifiedName(name)) > 0 || !hasDomain:
		c.errorf(p, name, "%q is not an extended resource name: write domain/name, e.g. \"nvidia.com/gpu\" or \"nvidia.com/gpu.shared\"", name)
	case domain == "kubernetes.io" || strings.HasSuffix(domain, ".kubernetes.io") || domain == "k8s.io" || strings.HasSuffix(domain, ".k8s.io"):
		c.errorf(p, name, "%q uses a domain reserved for Kubernetes: use a vendor domain, e.g. \"nvidia.com/gpu\"", name)
	}
}

func (c *checker) xids(p *field.Path, xids []uint64, base *v1alpha1.DevicePlugin) {
	if base != nil && base.HealthChecks != nil && slicesEqual(xids, base.HealthChecks.IgnoredXIDs) {
		return
	}
	seen := map[uint64]bool{}
	for i, x := range xids {
		switch {
		case x == 0 || x > 1024:
			c.errorf(p.Index(i), x, "%d is not an NVIDIA XID (they run from 1 to a few hundred): remove it", x)
		case seen[x]:
			c.warnf(p.Index(i), x, "XID %d is listed twice: remove the duplicate", x)
		}
		seen[x] = true
	}
}

func slicesEqual(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// nodePools checks each pool and that no node can fall into two pools. Selectors are equality
// maps, so two pools are disjoint exactly when some key appears in both with different values;
// otherwise a node carrying both label sets would run two device plugins for the same GPUs.
func (c *checker) nodePools(s *v1alpha1.Spec, p *field.Path) {
	names := map[string]int{}
	for i := range s.NodePools {
		np := &s.NodePools[i]
		ip := p.Index(i)
		if c.required(ip.Child("name"), np.Name, "inference") && c.dnsLabel(ip.Child("name"), np.Name) {
			if len(np.Name) > poolNameLimit() {
				c.errorf(ip.Child("name"), np.Name, "%q is %d characters; rendered names %q+name must fit 63: use at most %d characters", np.Name, len(np.Name), poolObjectPrefix, poolNameLimit())
			}
			if j, dup := names[np.Name]; dup {
				c.errorf(ip.Child("name"), np.Name, "name %q is already used by spec.nodePools[%d]: pool names must be unique", np.Name, j)
			}
			names[np.Name] = i
		}
		sp := ip.Child("nodeSelector")
		if len(np.NodeSelector) == 0 {
			c.errorf(sp, nil, "is required: a pool without a nodeSelector would take every GPU node; set e.g. {pool: %s}", cmp.Or(np.Name, "inference"))
		} else {
			c.selector(sp, np.NodeSelector)
			for _, k := range slices.Sorted(maps.Keys(np.NodeSelector)) {
				if v, ok := s.NodeSelector[k]; ok && v != np.NodeSelector[k] {
					c.errorf(sp.Key(k), np.NodeSelector[k], "%s=%s contradicts spec.nodeSelector %s=%s, so the pool matches no GPU node: drop the key or use a different label", k, np.NodeSelector[k], k, v)
				}
			}
		}
		if np.DevicePlugin != nil {
			c.devicePlugin(np.DevicePlugin, &s.DevicePlugin, s, ip.Child("devicePlugin"))
		}
	}
	sorted := make([][]labelPair, len(s.NodePools))
	for i := range s.NodePools {
		sorted[i] = sortedPairs(s.NodePools[i].NodeSelector)
	}
	for j := range s.NodePools {
		for i := 0; i < j; i++ {
			if !disjoint(sorted[i], sorted[j]) {
				c.poolOverlap(s, p, i, j)
			}
		}
	}
}

type labelPair struct{ key, value string }

func sortedPairs(m map[string]string) []labelPair {
	out := make([]labelPair, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, labelPair{k, m[k]})
	}
	return out
}

// disjoint reports whether some key is in both selectors with different values. It merges
// two sorted lists because the pairwise check is quadratic in the number of pools.
func disjoint(a, b []labelPair) bool {
	for i, j := 0, 0; i < len(a) && j < len(b); {
		switch {
		case a[i].key < b[j].key:
			i++
		case a[i].key > b[j].key:
			j++
		case a[i].value != b[j].value:
			return true
		default:
			i, j = i+1, j+1
		}
	}
	return false
}

// poolOverlap reports two pools that are not disjoint.
func (c *checker) poolOverlap(s *v1alpha1.Spec, p *field.Path, i, j int) {
	a, b := s.NodePools[i].NodeSelector, s.NodePools[j].NodeSelector
	if len(a) == 0 || len(b) == 0 {
		return // reported as missing
	}
	sp := p.Index(j).Child("nodeSelector")
	other := describePool(i, s.NodePools[i].Name)
	if maps.Equal(a, b) {
		c.errorf(sp, b, "is identical to the nodeSelector of %s: the same nodes would run two device plugins; give each pool a distinct label value", other)
		return
	}
	c.errorf(sp, b, "overlaps %s: a node labelled with both selectors would join both pools; make them exclusive by one key with different values, e.g. pool: %s vs pool: %s",
		other, cmp.Or(s.NodePools[i].Name, "a"), cmp.Or(s.NodePools[j].Name, "b"))
}
