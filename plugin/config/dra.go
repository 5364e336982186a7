package config

// Facts of the DRA path shared by the function (DeviceClasses, guardrails) and the DRA plugin
// (ResourceSlices, CDI specs). The names are NVIDIA's DRA driver's
// (sigs.k8s.io/dra-driver-nvidia-gpu), so ResourceClaims and DeviceClass selectors written for
// it work unchanged.
const (
	// DRADriverName is the driver of every published ResourceSlice and the attribute domain.
	DRADriverName = "gpu.nvidia.com"
	// DRATypeGPU and DRATypeMIG are the values of the device attribute "type".
	DRATypeGPU = "gpu"
	DRATypeMIG = "mig"
	// DRAClaimCDIKind is the CDI kind of the spec the plugin writes per prepared claim
	// (file <DRAClaimCDIFilePrefix><claim UID>.json in the CDI directory); its devices are
	// named <claim UID>-<device>, never reused, so a runtime's CDI cache cannot hit a stale one.
	DRAClaimCDIKind       = "k8s.gpu.nvidia.com/claim"
	DRAClaimCDIFilePrefix = "k8s.gpu.nvidia.com-claim_"
)
