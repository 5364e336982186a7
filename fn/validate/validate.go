package validate

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/fn/render"
	"github.com/gpupolicy/gpupolicy/fn/validate/matrix"
)

// Options of a validation run.
type Options struct {
	// Now is "today" for the driver branch lifecycle; zero means time.Now(). Tests pin it so
	// results do not change as branches reach their end of life.
	Now time.Time
	// Matrix replaces the embedded version matrix (tests); nil means matrix.Default().
	Matrix *matrix.Matrix
}

// Policy validates a defaulted policy (v1alpha1.Default) and returns every problem; w is what
// the policy set itself (WrittenOf before defaulting), on which node pools are judged. It never
// modifies p and never panics on any decodable input.
func Policy(p *v1alpha1.GPUPolicy, w Written, opts Options) Results {
	c := &checker{m: opts.Matrix, now: opts.Now}
	if c.m == nil {
		c.m = matrix.Default()
	}
	if c.now.IsZero() {
		c.now = time.Now()
	}
	c.metadata(p)
	spec := field.NewPath("spec")
	c.cluster(&p.Spec, spec)
	c.containerRuntime(&p.Spec, spec.Child("containerRuntime"))
	c.driver(&p.Spec, spec.Child("driver"))
	c.driverUpgrade(&p.Spec, spec.Child("driver"))
	c.cuda(&p.Spec, spec.Child("cuda"))
	c.toolkit(&p.Spec, spec.Child("toolkit"))
	c.devicePlugin(&p.Spec.DevicePlugin, setIn(&p.Spec.DevicePlugin), &p.Spec, spec.Child("devicePlugin"))
	c.exporter(&p.Spec.Exporter, spec.Child("exporter"))
	c.resources(spec.Child("featureDiscovery", "resources"), p.Spec.FeatureDiscovery.Resources)
	c.updateStrategy(spec.Child("featureDiscovery", "updateStrategy"), p.Spec.FeatureDiscovery.UpdateStrategy)
	c.nodePools(&p.Spec, w, spec.Child("nodePools"))
	c.allocation(&p.Spec)
	c.kubernetes(&p.Spec, spec)
	c.images(&p.Spec, spec)
	c.derivedNames(p)
	c.deadSettings(&p.Spec, w)
	return c.res
}

// checker collects results; one method per part of the spec.
type checker struct {
	res Results
	m   *matrix.Matrix
	now time.Time
}

func (c *checker) add(sev Severity, path *field.Path, value any, format string, args ...any) {
	c.res = append(c.res, Result{Severity: sev, Field: path.String(), Value: value, Message: fmt.Sprintf(format, args...)})
}

func (c *checker) errorf(path *field.Path, value any, format string, args ...any) {
	c.add(SeverityError, path, value, format, args...)
}

func (c *checker) warnf(path *field.Path, value any, format string, args ...any) {
	c.add(SeverityWarning, path, value, format, args...)
}

func (c *checker) infof(path *field.Path, value any, format string, args ...any) {
	c.add(SeverityInfo, path, value, format, args...)
}

// required reports an empty required field and tells whether the value is present.
func (c *checker) required(path *field.Path, value, example string) bool {
	if value == "" {
		c.errorf(path, nil, "is required and has no default: set it, for example %s: %q", path, example)
		return false
	}
	return true
}

// oneOf checks an enumeration.
func (c *checker) oneOf(path *field.Path, value string, allowed ...string) bool {
	for _, a := range allowed {
		if value == a {
			return true
		}
	}
	c.errorf(path, value, "%q is not one of %s: use one of those values", value, quoteList(allowed))
	return false
}

func quoteList(items []string) string {
	s := ""
	for i, it := range items {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%q", it)
	}
	return s
}

// derivedNames checks every name and label value the renderer builds from a field (the pool's
// DaemonSet gpu-device-plugin-<pool>, Flux's <name>-<stage>, ...) against its Kubernetes
// limit. Each field is reported once, for the derived name that leaves it the least room; a
// field already reported on its own is skipped.
func (c *checker) derivedNames(p *v1alpha1.GPUPolicy) {
	worst := map[string]render.DerivedName{}
	var order []string
	room := func(d render.DerivedName) int { return d.Limit - (len(d.Value) - len(d.Source)) }
	for _, d := range render.DerivedNames(p) {
		f := d.Field.String()
		if len(d.Value) <= d.Limit || c.hasError(f) {
			continue
		}
		w, seen := worst[f]
		if !seen {
			order = append(order, f)
		}
		if !seen || room(d) < room(w) {
			worst[f] = d
		}
	}
	for _, f := range order {
		d := worst[f]
		c.errorf(d.Field, d.Source, "%q is %d characters and makes %s %q (%d characters), over Kubernetes' limit of %d: use at most %d characters in %s",
			d.Source, len(d.Source), d.What, d.Value, len(d.Value), d.Limit, room(d), f)
	}
}

// hasError reports whether an error was already reported at path.
func (c *checker) hasError(path string) bool {
	return slices.ContainsFunc(c.res, func(r Result) bool { return r.Severity == SeverityError && r.Field == path })
}

func (c *checker) metadata(p *v1alpha1.GPUPolicy) {
	path := field.NewPath("metadata")
	if c.required(path.Child("name"), p.Metadata.Name, "fleet") {
		c.dnsSubdomain(path.Child("name"), p.Metadata.Name)
	}
	if p.Metadata.Namespace != "" {
		c.dnsLabel(path.Child("namespace"), p.Metadata.Namespace)
	}
	c.labelMap(path.Child("labels"), p.Metadata.Labels)
	for _, k := range slices.Sorted(maps.Keys(p.Metadata.Annotations)) {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			c.errorf(path.Child("annotations").Key(k), k, "annotation key %q is invalid: %s; use an optional DNS prefix and a name, e.g. \"example.com/owner\"", k, brief(errs))
		}
	}
}
