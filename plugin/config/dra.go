package config

import "fmt"

// Facts of the DRA path shared by the function (DeviceClasses, guardrails) and the DRA plugin
// (ResourceSlices, CDI specs). The names are NVIDIA's DRA driver's
// (sigs.k8s.io/dra-driver-nvidia-gpu), so ResourceClaims and DeviceClass selectors written for
// it work unchanged.
const (
	// DRADriverName is the driver of every published ResourceSlice and the attribute domain.
	DRADriverName = "gpu.nvidia.com"
	// AllocationDRA is DevicePlugin.Allocation where the DRA plugin serves a pool's nodes.
	AllocationDRA = "dra"
	// DRATypeGPU and DRATypeMIG are the values of the device attribute "type".
	DRATypeGPU = "gpu"
	DRATypeMIG = "mig"
	// DRAClaimCDIKind is the CDI kind of the spec the plugin writes per prepared claim
	// (file <DRAClaimCDIFilePrefix><claim UID>.json in the CDI directory); its devices are
	// named <claim UID>-<device>, never reused, so a runtime's CDI cache cannot hit a stale one.
	DRAClaimCDIKind       = "k8s.gpu.nvidia.com/claim"
	DRAClaimCDIFilePrefix = "k8s.gpu.nvidia.com-claim_"
)

// DRAGPUDeviceName and DRAMIGDeviceName are the ResourceSlice device names of a whole GPU (by
// its NVML index) and of a MIG device (its GPU's index, GPU and compute instance ids). The
// exporter parses them back (ParseDRADeviceName) to attribute a claim's devices to pods.
func DRAGPUDeviceName(index int) string { return fmt.Sprintf("gpu-%d", index) }

func DRAMIGDeviceName(index, gi, ci int) string {
	return fmt.Sprintf("gpu-%d-mig-%d-%d", index, gi, ci)
}

// ParseDRADeviceName reads a device name of DRAGPUDeviceName or DRAMIGDeviceName form; mig
// reports which, ok whether it is either.
func ParseDRADeviceName(name string) (index, gi, ci int, mig, ok bool) {
	if n, err := fmt.Sscanf(name, "gpu-%d-mig-%d-%d", &index, &gi, &ci); err == nil && n == 3 && name == DRAMIGDeviceName(index, gi, ci) {
		return index, gi, ci, true, true
	}
	if n, err := fmt.Sscanf(name, "gpu-%d", &index); err == nil && n == 1 && name == DRAGPUDeviceName(index) {
		return index, 0, 0, false, true
	}
	return 0, 0, 0, false, false
}
