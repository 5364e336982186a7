package render_test

import (
	"fmt"
	"testing"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/fn/render"
)

// policyWithPools is the default case with n single-label node pools.
func policyWithPools(b *testing.B, n int) *v1alpha1.GPUPolicy {
	p, _ := load(b, "default")
	for i := 0; i < n; i++ {
		p.Spec.NodePools = append(p.Spec.NodePools, v1alpha1.NodePool{
			Name:         fmt.Sprintf("pool-%04d", i),
			NodeSelector: map[string]string{"gpupolicy.dev/pool": fmt.Sprintf("pool-%04d", i)},
			DevicePlugin: &v1alpha1.DevicePlugin{Sharing: &v1alpha1.Sharing{TimeSlicing: &v1alpha1.TimeSlicing{Replicas: ptr(1 + i%8)}}},
		})
	}
	v1alpha1.Default(p)
	return p
}

// BenchmarkRender measures Render plus serialization (what the function and the CLI do per
// policy) for 1, 100 and 1,000 node pools.
func BenchmarkRender(b *testing.B) {
	for _, n := range []int{1, 100, 1000} {
		p := policyWithPools(b, n)
		b.Run(fmt.Sprintf("pools=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				objs, err := render.Render(p)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := objs.YAML(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
