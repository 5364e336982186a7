package validate

import (
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
)

// setEffect is a field the document sets that has a row in v1alpha1.Effects.
type setEffect struct {
	row int
	v1alpha1.SetField
}

// effectsSet records, before defaulting, every set field that takes effect only under a
// condition (v1alpha1.Effects).
func effectsSet(p *v1alpha1.GPUPolicy) []setEffect {
	var out []setEffect
	for i, e := range v1alpha1.Effects {
		for _, f := range v1alpha1.SetFields(p, e.Field) {
			out = append(out, setEffect{row: i, SetField: f})
		}
	}
	return out
}

// deadSettings refuses every field the document sets whose condition the defaulted policy
// rules out: it would do nothing while its author believes it does something. A field inside
// one already refused (spec.driver.upgrade.drain.timeout inside spec.driver.upgrade) is not
// reported again.
func (c *checker) deadSettings(s *v1alpha1.Spec, w Written) {
	var dead []string
	for _, f := range w.effects {
		e := v1alpha1.Effects[f.row]
		if e.Live(s, f.Pool) || (e.Off != nil && f.Value == e.Off) || under(f.Path, dead) {
			continue
		}
		dead = append(dead, f.Path)
		c.errorf(pathOf(f.Path), f.Value, "is set but does nothing: it takes effect only when %s, and this policy rules that out; remove %s, or %s",
			e.When, f.Path, e.Fix)
	}
}

// under reports whether path is one of parents or inside one.
func under(path string, parents []string) bool {
	for _, p := range parents {
		if path == p || strings.HasPrefix(path, p+".") {
			return true
		}
	}
	return false
}

// pathOf turns "spec.nodePools[2].driver.image" into a field.Path that prints the same.
func pathOf(s string) *field.Path {
	var p *field.Path
	for _, part := range strings.Split(s, ".") {
		name, idx, list := strings.Cut(part, "[")
		if p == nil {
			p = field.NewPath(name)
		} else {
			p = p.Child(name)
		}
		if list {
			n := 0
			for _, r := range strings.TrimSuffix(idx, "]") {
				n = n*10 + int(r-'0')
			}
			p = p.Index(n)
		}
	}
	return p
}
