package validate

import (
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/fn/validate/matrix"
)

// allocations lists where each allocation mode is chosen: spec.allocation for the nodes
// outside every pool, then each pool's (defaulted from spec.allocation).
type allocationSite struct {
	value string
	path  *field.Path
	pool  int // -1: spec.allocation
}

func allocations(s *v1alpha1.Spec) []allocationSite {
	out := []allocationSite{{s.Allocation, field.NewPath("spec", "allocation"), -1}}
	for i := range s.NodePools {
		out = append(out, allocationSite{s.NodePools[i].Allocation, field.NewPath("spec", "nodePools").Index(i).Child("allocation"), i})
	}
	return out
}

// usesDRA reports whether any GPU node is served by the DRA plugin.
func usesDRA(s *v1alpha1.Spec) bool {
	for _, a := range allocations(s) {
		if a.value == v1alpha1.AllocationDRA {
			return true
		}
	}
	return false
}

// allocation checks the modes and that DRA has the CDI devices it hands to containerd. What a
// DRA pool must not configure (the device plugin's own settings) is in v1alpha1.Effects.
func (c *checker) allocation(s *v1alpha1.Spec) {
	cdiNeeded := false
	for _, a := range allocations(s) {
		if !c.oneOf(a.path, a.value, v1alpha1.AllocationDevicePlugin, v1alpha1.AllocationDRA) || a.value != v1alpha1.AllocationDRA {
			continue
		}
		if !v1alpha1.Bool(s.Toolkit.CDI) && !cdiNeeded {
			cdiNeeded = true
			c.errorf(a.path, a.value, "DRA hands each GPU to containerd as the node's CDI device nvidia.com/gpu=<uuid>, which the toolkit stage writes only with toolkit.cdi: true: set toolkit.cdi: true or allocation: devicePlugin")
		}
	}
}

// draMatrix: DRA's v1 API (resource.k8s.io/v1, DeviceClass CEL selectors, ResourceSlices) is
// GA from Kubernetes 1.34, and the kubelet hands a claim's devices to containerd only as CRI
// CDI devices, which containerd's CRI plugin honours from 1.7.
func (c *checker) draMatrix(s *v1alpha1.Spec, k matrix.Version, p *field.Path) {
	if !usesDRA(s) {
		return
	}
	c.featureGates(s.KubernetesVersion, k, p, c.m.Kubernetes.Features, "dra", "allocation: dra", "or set allocation: devicePlugin")
}
