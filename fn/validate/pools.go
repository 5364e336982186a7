package validate

import (
	"cmp"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// Written is what a policy document sets itself, recorded before v1alpha1.Default: defaulting
// fills every node pool's devicePlugin from spec.devicePlugin, after which a value a pool set
// and one it inherited look alike. A pool is validated on what it set (presence), so a mistake
// it inherits is reported once, at spec.devicePlugin, and one it repeats is reported at the
// pool too.
type Written struct {
	pools   []devicePluginSet // by index of spec.nodePools
	effects []setEffect       // the set fields that take effect only under a condition
}

// WrittenOf records what p sets. Call it on the decoded policy, before v1alpha1.Default.
func WrittenOf(p *v1alpha1.GPUPolicy) Written {
	w := Written{pools: make([]devicePluginSet, len(p.Spec.NodePools)), effects: effectsSet(p)}
	for i := range p.Spec.NodePools {
		w.pools[i] = setIn(p.Spec.NodePools[i].DevicePlugin)
	}
	return w
}

// devicePluginSet is what one devicePlugin block sets: "" and nil mean not set (the decoder
// reads an explicit null like an absent field; an explicit 0 is set). The values are copied out, so
// defaulting the block afterwards cannot change them; Default only assigns a nil slice, never
// writes into one.
type devicePluginSet struct {
	resourceName, migStrategy, deviceListStrategy string
	replicas                                      *int
	mps                                           *v1alpha1.MPS // sharing.mps as written (its replicas may be unset)
	ignoredXIDs                                   []uint64
	resources                                     *corev1.ResourceRequirements
	updateStrategy                                *v1alpha1.UpdateStrategy
}

func setIn(dp *v1alpha1.DevicePlugin) devicePluginSet {
	if dp == nil {
		return devicePluginSet{}
	}
	set := devicePluginSet{resourceName: dp.ResourceName, migStrategy: dp.MIGStrategy, deviceListStrategy: dp.DeviceListStrategy}
	if dp.Resources != nil {
		set.resources = dp.Resources.DeepCopy()
	}
	if u := dp.UpdateStrategy; u != nil && u.MaxUnavailable != nil {
		mu := *u.MaxUnavailable
		set.updateStrategy = &v1alpha1.UpdateStrategy{MaxUnavailable: &mu}
	}
	if dp.Sharing != nil && dp.Sharing.TimeSlicing != nil {
		if r := dp.Sharing.TimeSlicing.Replicas; r != nil {
			set.replicas = new(*r)
		}
	}
	if dp.Sharing != nil && dp.Sharing.MPS != nil {
		set.mps = &v1alpha1.MPS{}
		if r := dp.Sharing.MPS.Replicas; r != nil {
			set.mps.Replicas = new(*r)
		}
	}
	if dp.HealthChecks != nil {
		set.ignoredXIDs = dp.HealthChecks.IgnoredXIDs
	}
	return set
}

// devicePlugin checks the values set holds; dp is the same block defaulted, for the checks
// that read a value next to the one set (the resource name time-sliced replicas are
// advertised under). For spec.devicePlugin set is the defaulted block itself: every value is
// its own.
func (c *checker) devicePlugin(dp *v1alpha1.DevicePlugin, set devicePluginSet, s *v1alpha1.Spec, p *field.Path) {
	c.resources(p.Child("resources"), set.resources)
	c.updateStrategy(p.Child("updateStrategy"), set.updateStrategy)
	if set.resourceName != "" {
		c.resourceName(p.Child("resourceName"), set.resourceName)
	}
	if set.migStrategy != "" {
		c.oneOf(p.Child("migStrategy"), set.migStrategy, config.MIGNone, config.MIGSingle, config.MIGMixed)
	}
	if (set.resourceName != "" || set.migStrategy != "") && dp.MIGStrategy == config.MIGMixed && strings.Contains(dp.ResourceName, "/") {
		c.migResourceDomain(p.Child("resourceName"), dp.ResourceName)
	}
	if set.deviceListStrategy != "" &&
		c.oneOf(p.Child("deviceListStrategy"), set.deviceListStrategy, config.DeviceListCDICRI, config.DeviceListEnvVar) &&
		set.deviceListStrategy == config.DeviceListCDICRI && !v1alpha1.Bool(s.Toolkit.CDI) {
		c.errorf(p.Child("deviceListStrategy"), set.deviceListStrategy, "cdi-cri passes CDI device names, which need toolkit.cdi: true; set toolkit.cdi: true or deviceListStrategy: envvar")
	}
	if set.replicas != nil {
		r := *set.replicas
		rp := p.Child("sharing", "timeSlicing", "replicas")
		lim := v1alpha1.Limits["TimeSlicing.Replicas"]
		switch {
		case r == 0:
			c.errorf(rp, r, "0 replicas would advertise no GPU: replicas must be at least 1 (1 = no sharing); set 1 or more, or remove the field for the default %d", config.DefaultReplicas)
		case r < 1:
			c.errorf(rp, r, "replicas must be at least 1 (1 = no sharing): use 1 or more")
		case int64(r) > lim.Max:
			c.errorf(rp, r, "%d replicas is over the limit of %d: the device plugin lists every replica of every device in one ListAndWatch message (~66 bytes each), which on a node with 16 GPUs of 7 MIG devices passes gRPC's 4 MiB message limit at about 570 replicas, and the kubelet then drops the list and the node advertises no GPU; use at most %d (typical values are 2–8)", r, lim.Max, lim.Max)
		case r > 64:
			c.warnf(rp, r, "%d replicas per GPU leaves each container a sliver of time and memory with no isolation; typical values are 2–8", r)
		}
		if r > 1 && dp.ResourceName == config.DefaultResourceName {
			c.infof(rp, r, "time-sliced replicas are advertised as %s, so a pod asking for one GPU cannot tell a shared slice from a whole GPU; a resourceName such as \"nvidia.com/gpu.shared\" makes the sharing visible", dp.ResourceName)
		}
	}
	if set.mps != nil {
		c.mps(dp, set, p)
	}
	if set.ignoredXIDs != nil {
		c.xids(p.Child("healthChecks", "ignoredXIDs"), set.ignoredXIDs)
	}
}

// mps checks sharing.mps where it is written: its replicas, and what k8s-device-plugin v0.17.4
// refuses beside it (time-slicing, migStrategy mixed), read from the defaulted block; a pool
// that puts its GPUs in MIG mode is poolMPS's.
func (c *checker) mps(dp *v1alpha1.DevicePlugin, set devicePluginSet, p *field.Path) {
	mp := p.Child("sharing", "mps")
	rp := mp.Child("replicas")
	lim := v1alpha1.Limits["MPS.Replicas"]
	switch r := set.mps.Replicas; {
	case r == nil:
		c.errorf(rp, nil, "is required: how many clients share each GPU, 2 to %d (e.g. 4)", lim.Max)
	case *r < 2:
		c.errorf(rp, *r, "MPS shares a GPU between 2 or more clients (k8s-device-plugin refuses fewer too): use 2 to %d, or remove sharing.mps for whole GPUs", lim.Max)
	case int64(*r) > lim.Max:
		c.errorf(rp, *r, "the MPS server of Volta and newer GPUs accepts at most %d clients per GPU, so replicas beyond it would be pods whose CUDA context fails to start: use at most %d", lim.Max, lim.Max)
	}
	if r := dp.Sharing.TimeSlicing.GetReplicas(); r > 1 {
		c.errorf(mp, "{...}", "sharing.mps and sharing.timeSlicing.replicas %d are both set: a GPU is shared one way; keep one of them", r)
	}
	if dp.MIGStrategy == config.MIGMixed {
		c.errorf(mp, "{...}", "MPS does not share MIG devices (k8s-device-plugin refuses sharing.mps with migStrategy mixed too): set migStrategy: none, or share MIG devices by time-slicing")
	}
	if set.mps.Replicas != nil && *set.mps.Replicas > 1 && dp.ResourceName == config.DefaultResourceName {
		c.infof(rp, *set.mps.Replicas, "MPS replicas are advertised as %s, so a pod asking for one GPU cannot tell an MPS client from a whole GPU; a resourceName such as \"nvidia.com/gpu.shared\" (k8s-device-plugin's renameByDefault) makes the sharing visible", dp.ResourceName)
	}
}

// poolMPS refuses MPS, set or inherited, in a pool that partitions its GPUs with MIG: the MPS
// control daemon would find its GPUs in MIG mode and never serve the pool.
func (c *checker) poolMPS(np *v1alpha1.NodePool, set devicePluginSet, ip *field.Path) {
	if np.DevicePlugin.Sharing.GetMPS() == nil || np.MIG == nil || !migEnabled(np.MIG) || np.Allocation == v1alpha1.AllocationDRA {
		return
	}
	if set.mps != nil {
		c.errorf(ip.Child("devicePlugin", "sharing", "mps"), "{...}", "the pool's mig layouts put its GPUs in MIG mode, which MPS does not share: remove sharing.mps, or the MIG layouts")
		return
	}
	c.errorf(ip.Child("mig"), "{...}", "the pool inherits spec.devicePlugin.sharing.mps, and MPS does not share GPUs in MIG mode: give the pool its own devicePlugin.sharing (e.g. {timeSlicing: {replicas: 1}})")
}

func (c *checker) resourceName(p *field.Path, name string) {
	domain, _, hasDomain := strings.Cut(name, "/")
	switch {
	case len(validation.IsQualifiedName(name)) > 0 || !hasDomain:
		c.errorf(p, name, "%q is not an extended resource name: write domain/name, e.g. \"nvidia.com/gpu\" or \"nvidia.com/gpu.shared\"", name)
	case domain == "kubernetes.io" || strings.HasSuffix(domain, ".kubernetes.io") || domain == "k8s.io" || strings.HasSuffix(domain, ".k8s.io"):
		c.errorf(p, name, "%q uses a domain reserved for Kubernetes: use a vendor domain, e.g. \"nvidia.com/gpu\"", name)
	case len(name) > config.MaxResourceNameBytes:
		c.errorf(p, name, "%q is %d bytes, over the limit of %d: the device plugin's socket %s/%s would exceed the %d bytes of a unix socket path and the plugin could not start; shorten it, e.g. \"nvidia.com/gpu.shared\"",
			name, len(name), config.MaxResourceNameBytes, config.DefaultPluginDir, config.SocketName(name), config.MaxSocketPathBytes)
	}
}

// migResourceDomain bounds the domain of resourceName under migStrategy: mixed, where each
// slice shape is its own resource, "<domain>/mig-<profile>", with a socket of its own.
func (c *checker) migResourceDomain(p *field.Path, name string) {
	domain, _, _ := strings.Cut(name, "/")
	if max := config.MaxResourceNameBytes - len("/mig-") - config.MaxMIGProfileBytes; len(domain) > max {
		c.errorf(p, name, "the domain %q is %d bytes, over the limit of %d under migStrategy: mixed: each MIG profile is advertised as %s/mig-<profile> (up to %d bytes of profile) and its device plugin socket %s/%s would exceed the %d bytes of a unix socket path; use a shorter domain, e.g. \"nvidia.com\"",
			domain, len(domain), max, domain, config.MaxMIGProfileBytes, config.DefaultPluginDir, config.SocketName(domain+"/mig-<profile>"), config.MaxSocketPathBytes)
	}
}

func (c *checker) xids(p *field.Path, xids []uint64) {
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

// nodePools checks each pool and that no node can fall into two pools. Selectors are equality
// maps, so two pools are disjoint exactly when some key appears in both with different values;
// otherwise a node carrying both label sets would run two device plugins for the same GPUs.
func (c *checker) nodePools(s *v1alpha1.Spec, w Written, p *field.Path) {
	names := map[string]int{}
	for i := range s.NodePools {
		np := &s.NodePools[i]
		ip := p.Index(i)
		if c.required(ip.Child("name"), np.Name, "inference") && c.dnsLabel(ip.Child("name"), np.Name) {
			if j, dup := names[np.Name]; dup {
				c.errorf(ip.Child("name"), np.Name, "name %q is already used by spec.nodePools[%d]: pool names must be unique", np.Name, j)
			}
			names[np.Name] = i
		}
		sp := ip.Child("nodeSelector")
		if len(np.NodeSelector) == 0 {
			c.errorf(sp, nil, "is required: a pool without a nodeSelector would take every GPU node; set e.g. {pool: %s}", cmp.Or(np.Name, "inference"))
		} else {
			c.selector(sp, np.NodeSelector, s, false)
			for _, k := range slices.Sorted(maps.Keys(np.NodeSelector)) {
				if v, ok := s.NodeSelector[k]; ok && v != np.NodeSelector[k] {
					c.errorf(sp.Key(k), np.NodeSelector[k], "%s=%s contradicts spec.nodeSelector %s=%s, so the pool matches no GPU node: drop the key or use a different label", k, np.NodeSelector[k], k, v)
				}
			}
		}
		if np.DevicePlugin != nil {
			c.devicePlugin(np.DevicePlugin, w.pools[i], s, ip.Child("devicePlugin"))
		}
		if np.MIG != nil {
			c.mig(np, ip)
		}
		if np.DevicePlugin != nil {
			c.poolMPS(np, w.pools[i], ip)
		}
		if np.Driver != nil {
			c.poolDriver(s, np, ip.Child("driver"))
		}
		if len(np.NodeSelector) > 0 && v1alpha1.Bool(s.FeatureDiscovery.Enabled) {
			c.poolSelection(s, np, ip)
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
