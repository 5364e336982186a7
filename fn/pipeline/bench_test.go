package pipeline_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gpupolicy/gpupolicy/fn/pipeline"
	"github.com/gpupolicy/gpupolicy/fn/validate"
)

// minimal is the smallest valid policy: the three fields without a default.
const minimal = `apiVersion: gpupolicy.dev/v1alpha1
kind: GPUPolicy
metadata:
  name: fleet
spec:
  kubernetesVersion: "1.34"
  driver: {version: "580.95.05"}
  cuda: {version: "12.8"}
`

// BenchmarkValidate measures decode + default + validate for policies with 1, 100 and 1,000
// node pools. The pairwise disjointness check is quadratic in the number of pools; this shows
// what that costs at sizes far beyond real fleets.
func BenchmarkValidate(b *testing.B) {
	for _, n := range []int{1, 100, 1000} {
		var doc strings.Builder
		doc.WriteString(minimal + "  nodePools:\n")
		for i := range n {
			fmt.Fprintf(&doc, "  - name: pool-%d\n    nodeSelector: {pool: p%d, gpu.model: a100}\n    devicePlugin: {sharing: {timeSlicing: {replicas: 4}}}\n", i, i)
		}
		data := []byte(doc.String())
		b.Run(fmt.Sprintf("pools=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, res := pipeline.Validate(data, validate.Options{Now: today}); res.HasErrors() {
					b.Fatal(res.Text(""))
				}
			}
		})
	}
}

// BenchmarkLoadScaling is decode → default → validate → render for policies that grow to the
// node-pool limit (1,000): time, bytes and allocations per pool should stay flat (linear
// cost). BENCHMARKS.md has the numbers.
func BenchmarkLoadScaling(b *testing.B) {
	for _, n := range []int{125, 250, 500, 1000} {
		var doc strings.Builder
		doc.WriteString(minimal + "  imagePullSecrets: [a, b]\n  nodePools:\n")
		for i := range n {
			fmt.Fprintf(&doc, "  - name: pool-%d\n    nodeSelector: {gpupolicy.dev/pool: p%d}\n    devicePlugin: {sharing: {timeSlicing: {replicas: %d}}}\n", i, i, 1+i%8)
		}
		data := []byte(doc.String())
		b.Run(fmt.Sprintf("pools=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, res := pipeline.Load(data, validate.Options{Now: today}); res.HasErrors() {
					b.Fatal(res.Text(""))
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n)/1e3, "µs/pool")
		})
	}
}
