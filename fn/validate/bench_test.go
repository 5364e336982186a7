package validate

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
)

// BenchmarkLoad measures decode + default + validate for policies with 1, 100 and 1,000 node
// pools. The pairwise disjointness check is quadratic in the number of pools; this shows what
// that costs at sizes far beyond real fleets.
func BenchmarkLoad(b *testing.B) {
	for _, n := range []int{1, 100, 1000} {
		var doc strings.Builder
		doc.WriteString(base + "  nodePools:\n")
		for i := range n {
			fmt.Fprintf(&doc, "  - name: pool-%d\n    nodeSelector: {pool: p%d, gpu.model: a100}\n    devicePlugin: {sharing: {timeSlicing: {replicas: 4}}}\n", i, i)
		}
		data := []byte(doc.String())
		b.Run(fmt.Sprintf("pools=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, res := Load(data, Options{Now: today}); res.HasErrors() {
					b.Fatal(res.Text(""))
				}
			}
		})
	}
}

// BenchmarkPolicy is validation alone, on an already decoded and defaulted policy.
func BenchmarkPolicy(b *testing.B) {
	p, err := v1alpha1.Decode([]byte(base))
	if err != nil {
		b.Fatal(err)
	}
	v1alpha1.Default(p)
	b.ReportAllocs()
	for b.Loop() {
		Policy(p, Options{Now: today})
	}
}
