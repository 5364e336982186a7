package render

import (
	"fmt"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"

	"github.com/gpupolicy/gpupolicy/fn/api/v1alpha1"
	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// Names of the DRA objects. The DeviceClasses and the driver keep the names of NVIDIA's DRA
// driver (sigs.k8s.io/dra-driver-nvidia-gpu), so ResourceClaims written for it work unchanged.
const (
	NameDRAPlugin     = config.DaemonSetDRAPlugin
	NameDRAGuardrails = "gpupolicy-resourceslice-guardrails"

	DeviceClassGPU = config.DRADriverName // whole GPUs
	DeviceClassMIG = "mig.nvidia.com"     // MIG devices

	kubeletPluginsDir         = "/var/lib/kubelet/plugins"
	kubeletPluginsRegistryDir = "/var/lib/kubelet/plugins_registry"
	cdiSpecDir                = "/var/run/cdi"
)

// draRules let the DRA plugin publish its node's ResourceSlices (the resourceslice controller
// lists and watches them, creates, updates and deletes), read the claims the kubelet asks it to
// prepare, and read its node for the slices' owner reference. The guardrails confine the slice
// writes to its own node.
var draRules = []rbacv1.PolicyRule{
	{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceslices"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
	{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims"}, Verbs: []string{"get"}},
	// Its devices' Ready condition in a claim's status.devices when the claim's config is
	// refused: the status, and the API server's per-driver check of status.devices (only its own
	// driver's entries, only for claims allocated on the node its token is bound to).
	{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims/status"}, Verbs: []string{"update"}},
	{APIGroups: []string{"resource.k8s.io"}, Resources: []string{"resourceclaims/driver"}, ResourceNames: []string{config.DRADriverName}, Verbs: []string{"associated-node:update"}},
	{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get"}},
	// Why a claim's device config is refused, on the claim (the kubelet tells the pod).
	{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
}

// usesDRA reports whether any GPU node gets the DRA plugin.
func (c *plan) usesDRA() bool {
	for _, pl := range devicePluginPools(c.p) {
		if pl.allocation == v1alpha1.AllocationDRA {
			return true
		}
	}
	return false
}

// renderDeviceClasses makes the two classes a claim names: whole GPUs and MIG devices, both
// selecting on the driver's type attribute, as NVIDIA's driver defines them.
func renderDeviceClasses(c *plan) (Objects, error) {
	if !c.usesDRA() {
		return nil, nil
	}
	class := func(name, typ string) Object {
		m := c.meta(NameDRAPlugin, false)
		m.Name = name
		return Object{Stage: StagePrereqs, Component: "dra", Obj: &resourcev1.DeviceClass{
			TypeMeta:   typeMeta("resource.k8s.io/v1", "DeviceClass"),
			ObjectMeta: m,
			Spec: resourcev1.DeviceClassSpec{Selectors: []resourcev1.DeviceSelector{{CEL: &resourcev1.CELDeviceSelector{
				Expression: fmt.Sprintf("device.driver == %s && device.attributes[%s].type == %s",
					celString(config.DRADriverName), celString(config.DRADriverName), celString(typ)),
			}}}},
		}}
	}
	return Objects{class(DeviceClassGPU, config.DRATypeGPU), class(DeviceClassMIG, config.DRATypeMIG)}, nil
}

// renderDRAPlugin is the DRA kubelet plugin of one pool: the device-plugin stage, gated and
// placed like the device plugin it replaces on those nodes. It writes its sockets under the
// kubelet's plugins and plugins_registry directories and one CDI spec per prepared claim under
// /var/run/cdi, and a claim's MPS control daemon under the MPS root; it runs unprivileged under
// the nvidia runtime class (NVML and NVIDIA's programs are injected).
func (c *plan) renderDRAPlugin(pl pool) (Object, error) {
	vols, mounts := volumesAndMounts(
		configMapMount("device-plugin-config", config.DevicePluginConfigMap+pl.suffix(), config.DevicePluginDir),
		hostPath("kubelet-plugins", kubeletPluginsDir, corev1.HostPathDirectoryOrCreate, kubeletPluginsDir, false),
		hostPath("kubelet-plugins-registry", kubeletPluginsRegistryDir, corev1.HostPathDirectoryOrCreate, kubeletPluginsRegistryDir, false),
		hostPath("cdi", cdiSpecDir, corev1.HostPathDirectoryOrCreate, cdiSpecDir, false),
		hostPath("host-sys", "/sys", corev1.HostPathDirectory, hostRoot+"/sys", true),
		hostPath("host-dev", "/dev", corev1.HostPathDirectory, hostRoot+"/dev", true),
		// A claim's GpuConfig with sharing strategy MPS gets its own MPS control daemon, its
		// pipe, log and shared memory (a tmpfs, under the host's /run) in <mps root>/dra/<id>.
		hostPath("mps-root", config.MPSHostRoot, corev1.HostPathDirectoryOrCreate, config.MPSContainerRoot, false),
	)
	return c.buildPluginDaemonSet(pl, NameDRAPlugin, "dra-plugin", vols, corev1.Container{
		Name:  "dra-plugin",
		Image: c.images.gpupolicy,
		Command: []string{"gpu-device-plugin", "dra",
			"--config", config.DevicePluginDir + "/" + config.DevicePluginFile,
			"--plugins-dir", kubeletPluginsDir,
			"--registry-dir", kubeletPluginsRegistryDir,
			"--cdi-dir", cdiSpecDir,
			"--mps-dir", config.MPSContainerRoot,
			"--host-root", hostRoot},
		// NVML, nvidia-smi ("utility": a claim's time-slice) and the driver's MPS programs
		// ("compute": a claim's MPS control daemon), injected by the nvidia runtime.
		Env:       append([]corev1.EnvVar{nodeNameEnv()}, computeEnv()...),
		Resources: resourcesOr(pl.settings.Resources, "20m", "64Mi", "256Mi"),
		// uid 0 without capabilities or privilege: the kubelet's plugin directories and
		// /var/run/cdi are root-owned.
		SecurityContext: asRoot(unprivileged()),
		VolumeMounts:    mounts,
	})
}

// renderDRAGuardrails confines the DRA plugin's ResourceSlice writes (RBAC cannot say "only
// your own node"): every slice it creates, updates or deletes must be of driver gpu.nvidia.com
// on the node its pod runs on (the service account token's node-name claim), so a compromised
// plugin cannot advertise or withdraw another node's GPUs.
func renderDRAGuardrails(c *plan) (Objects, error) {
	if !c.guardrails() || !c.usesDRA() {
		return nil, nil
	}
	fail := admissionv1.Fail
	claim := fmt.Sprintf("request.userInfo.extra[%s]", celString(nodeNameClaim))
	slice := "(request.operation == 'DELETE' ? oldObject : object)"
	policy := &admissionv1.ValidatingAdmissionPolicy{
		TypeMeta:   typeMeta("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy"),
		ObjectMeta: c.meta(NameDRAGuardrails, false),
		Spec: admissionv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionv1.MatchResources{ResourceRules: []admissionv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionv1.RuleWithOperations{
					Operations: []admissionv1.OperationType{admissionv1.Create, admissionv1.Update, admissionv1.Delete},
					Rule:       admissionv1.Rule{APIGroups: []string{"resource.k8s.io"}, APIVersions: []string{"*"}, Resources: []string{"resourceslices"}},
				},
			}}},
			MatchConditions: []admissionv1.MatchCondition{{
				Name:       "gpupolicy-dra-plugin",
				Expression: "request.userInfo.username == " + celString(c.serviceAccountUser(NameDRAPlugin)),
			}},
			Validations: []admissionv1.Validation{
				{
					Expression: fmt.Sprintf("has(request.userInfo.extra) && %s in request.userInfo.extra && size(%s) > 0 && has(%s.spec.nodeName) && %s.spec.nodeName == %s[0]",
						celString(nodeNameClaim), claim, slice, slice, claim),
					Message: "the GPU DRA plugin may only write ResourceSlices of the node its pod runs on (spec.nodeName must be the service account token claim " + nodeNameClaim + ")",
				},
				{
					Expression: slice + ".spec.driver == " + celString(config.DRADriverName),
					Message:    "the GPU DRA plugin may only write ResourceSlices of driver " + config.DRADriverName,
				},
			},
		},
	}
	return c.denyingPolicy(policy), nil
}
