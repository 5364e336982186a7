package validate

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/fn/render"
)

// containerResources are the resources a node program may ask for: it must never take a GPU
// (or any extended resource) from the workloads it serves.
var containerResources = []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage}

// resources checks a component's container resources the way the API server would refuse the
// DaemonSet (a request over its limit), and what it would accept but hurt: an extended
// resource (nvidia.com/gpu) a node program would take from the workloads.
func (c *checker) resources(p *field.Path, r *corev1.ResourceRequirements) {
	if r == nil {
		return
	}
	for _, part := range []struct {
		name string
		list corev1.ResourceList
	}{{"requests", r.Requests}, {"limits", r.Limits}} {
		for _, name := range slices.Sorted(maps.Keys(part.list)) {
			q, np := part.list[name], p.Child(part.name).Key(string(name))
			switch {
			case !slices.Contains(containerResources, name):
				c.errorf(np, q.String(), "%s is not a resource a node program may use: set only cpu, memory and ephemeral-storage (a GPU or other extended resource would be taken from the workloads)", name)
			case q.Sign() < 0:
				c.errorf(np, q.String(), "%s is negative: give a quantity such as 64Mi (memory) or 20m (cpu)", q.String())
			default:
				c.quantity(np, name, q)
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(r.Requests)) {
		req := r.Requests[name]
		if lim, ok := r.Limits[name]; ok && req.Cmp(lim) > 0 {
			c.errorf(p.Child("requests").Key(string(name)), req.String(), "request %s is over the limit %s (resources.limits.%s): the API server refuses the DaemonSet; raise the limit or lower the request", req.String(), lim.String(), name)
		}
	}
	if len(r.Claims) > 0 {
		c.errorf(p.Child("claims"), len(r.Claims), "resource claims are not rendered for node programs (their pods have no resourceClaims): remove resources.claims")
	}
}

// Plausible bounds of a node program's resources. Each program is a small Go process (tens of
// MiB, a few millicores at rest, BENCHMARKS.md); the bounds are far outside that and catch the
// unit slips that parse: memory "256m" is 0.256 bytes (every container OOM-killed at start),
// "256" is 256 bytes, cpu "100" is 100 cores (the pod never schedules).
var (
	minBytes  = resource.MustParse("1Mi")
	maxMemory = resource.MustParse("64Gi")
	maxCPU    = resource.MustParse("4")
	minCPU    = resource.MustParse("1m")
)

// quantity refuses a resource quantity whose unit is almost certainly a slip.
func (c *checker) quantity(p *field.Path, name corev1.ResourceName, q resource.Quantity) {
	if q.IsZero() {
		return // 0 asks for nothing: a request of none is valid
	}
	switch name {
	case corev1.ResourceMemory, corev1.ResourceEphemeralStorage:
		if q.Cmp(minBytes) >= 0 && (name != corev1.ResourceMemory || q.Cmp(maxMemory) <= 0) {
			return
		}
		v := q.String()
		switch {
		case q.Cmp(minBytes) < 0 && strings.HasSuffix(v, "m"):
			c.errorf(p, v, "%s is %s thousandths of a byte: 'm' means milli, not mega, so every container would be killed at start; write %sMi (mebibytes) or %sM (megabytes)", v, strings.TrimSuffix(v, "m"), strings.TrimSuffix(v, "m"), strings.TrimSuffix(v, "m"))
		case q.Cmp(minBytes) < 0:
			c.errorf(p, v, "%s is %s bytes, below 1Mi, which no program runs in: a number without a unit is bytes; write it with a unit, e.g. %sMi", v, v, strings.TrimRight(v, "kKi"))
		case name == corev1.ResourceMemory && q.Cmp(maxMemory) > 0:
			c.errorf(p, v, "%s is more than a node program may take on every GPU node (at most %s; the programs use tens of MiB): check the unit, e.g. %sMi was meant", v, maxMemory.String(), strings.TrimRight(v, "GTPEi"))
		}
	case corev1.ResourceCPU:
		if q.Cmp(maxCPU) <= 0 && q.Cmp(minCPU) >= 0 {
			return
		}
		v := q.String()
		switch {
		case q.Cmp(maxCPU) > 0:
			c.errorf(p, v, "%s is %s whole cores on every GPU node (at most %s): millicores are written with 'm', e.g. %sm", v, v, maxCPU.String(), v)
		case q.Cmp(minCPU) < 0:
			c.errorf(p, v, "%s is below 1m, the smallest CPU share Kubernetes grants: write at least 1m, e.g. 10m", v)
		}
	}
}

// updateStrategy checks maxUnavailable as the DaemonSet controller reads it: a positive
// number of nodes, or a percentage of them from 1% to 100%.
func (c *checker) updateStrategy(p *field.Path, u *v1alpha1.UpdateStrategy) {
	if u == nil || u.MaxUnavailable == nil {
		return
	}
	c.maxUnavailable(p.Child("maxUnavailable"), u.MaxUnavailable)
}

// maxUnavailable checks a number of nodes (1 or more) or a percentage from 1% to 100%.
func (c *checker) maxUnavailable(mp *field.Path, mu *intstr.IntOrString) {
	const fix = `use a number of nodes (1 or more) or a percentage of them from "1%" to "100%", e.g. "` + v1alpha1.DefaultMaxUnavailable + `"`
	if mu.Type == intstr.Int {
		if mu.IntVal < 1 {
			c.errorf(mp, mu.IntVal, "%d lets no node update, so the rollout never progresses: %s", mu.IntVal, fix)
		}
		return
	}
	pct, ok := strings.CutSuffix(mu.StrVal, "%")
	n, err := strconv.Atoi(pct)
	switch {
	case !ok || err != nil:
		c.errorf(mp, mu.StrVal, "%q is neither a number nor a percentage: %s", mu.StrVal, fix)
	case n < 1 || n > 100:
		c.errorf(mp, mu.StrVal, "%s is outside 1%%–100%%: %s", mu.StrVal, fix)
	}
}

// ownLabels are the labels render sets on every object; a Prometheus selector label must not
// replace them (the objects would leave their instance, or look unmanaged).
var ownLabels = []string{render.LabelName, render.LabelInstance, render.LabelManagedBy, render.LabelPartOf, render.LabelComponent}

// selectorLabels checks the labels a Prometheus selects ServiceMonitors or rules by.
func (c *checker) selectorLabels(p *field.Path, m map[string]string) {
	c.labelMap(p, m)
	for _, k := range slices.Sorted(maps.Keys(m)) {
		if slices.Contains(ownLabels, k) {
			c.errorf(p.Key(k), m[k], "%s is a label gpupolicy-fn sets on every object it renders: use your Prometheus's selector label instead, e.g. release: kube-prometheus-stack", k)
		}
	}
}
