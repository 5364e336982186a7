package render

import (
	"path"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpupolicy/gpupolicy/plugin/config"
)

// Paths under which node programs see the host (their --host-root).
const hostRoot = "/host"

// stateDir holds the toolkit status file the installer writes and the gate reads.
var stateDir = path.Dir(config.ToolkitStatusFile)

// nonRootUser runs the node programs that only read world-readable host files.
const nonRootUser = 65532

// procDriverMount is how the gate and the driver validator read the kernel module's version
// without NVML (the toolkit stage that injects NVML comes later). /proc/driver always
// exists; its nvidia entry appears when the module loads.
func procDriverMount() mount {
	return hostPath("host-proc-driver", "/proc/driver", corev1.HostPathDirectory, hostRoot+"/proc/driver", true)
}

// stateMount is the directory of the toolkit status file (written by the toolkit installer).
func stateMount(readOnly bool) mount {
	return hostPath("host-gpupolicy-state", stateDir, corev1.HostPathDirectoryOrCreate, hostRoot+stateDir, readOnly)
}

func agentConfigMount() mount {
	return configMapMount("agent-config", config.AgentConfigMap, config.AgentConfigDir)
}

// nonRoot drops the pod to an unprivileged user on top of the container's unprivileged context.
func nonRoot(sc *corev1.SecurityContext) *corev1.SecurityContext {
	sc.RunAsNonRoot = ptr(true)
	sc.RunAsUser = ptr(int64(nonRootUser))
	sc.RunAsGroup = ptr(int64(nonRootUser))
	return sc
}

// asRoot runs a container as uid 0. The image's default user is 65532 (Dockerfile USER), and
// neither privileged nor a hostPath mount changes the uid, so every container that needs root
// says so here, explicitly, which also makes the privilege audit show who runs as root.
func asRoot(sc *corev1.SecurityContext) *corev1.SecurityContext {
	sc.RunAsUser = ptr(int64(0))
	return sc
}

// nvmlEnv asks the nvidia runtime to inject NVML (libnvidia-ml, "utility") and every GPU's
// device node into a container that reads the GPUs through the runtime class; without these
// two variables the runtime injects neither, and NVML fails to load or sees no GPU.
func nvmlEnv() []corev1.EnvVar {
	return []corev1.EnvVar{
		{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"},
		{Name: "NVIDIA_DRIVER_CAPABILITIES", Value: "utility"},
	}
}

// computeEnv is nvmlEnv with the driver's compute programs too (NVIDIA's MPS control daemon and
// server, which nvidia-ctk's CDI spec and the legacy hook inject for "compute").
func computeEnv() []corev1.EnvVar {
	return []corev1.EnvVar{
		{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"},
		{Name: "NVIDIA_DRIVER_CAPABILITIES", Value: "compute,utility"},
	}
}

// renderNodeAgent is the entry stage: on every GPU node (entry selector only), it opens the
// stage gates in order as it verifies each stage. It only reads the host.
func renderNodeAgent(c *plan) (Objects, error) {
	vols, mounts := volumesAndMounts(procDriverMount(), stateMount(true), agentConfigMount())
	containers := []corev1.Container{{
		Name:            "gate",
		Image:           c.images.gpupolicy,
		Command:         []string{"gpu-node-agent", "gate", "--config", config.AgentConfigPath, "--host-root", hostRoot},
		Env:             []corev1.EnvVar{nodeNameEnv()},
		Resources:       resources("10m", "32Mi", "128Mi"),
		SecurityContext: nonRoot(unprivileged()),
		VolumeMounts:    mounts,
	}}
	if c.upgrades() {
		// The upgrade step: this node's part of a rolling driver upgrade (slots, cordon,
		// drain, driver pod replacement, validation) and the drift taint. API calls only.
		containers = append(containers, corev1.Container{
			Name:    "driver-upgrade",
			Image:   c.images.gpupolicy,
			Command: []string{"gpu-node-agent", "upgrade", "--config", config.AgentConfigPath},
			Env: []corev1.EnvVar{nodeNameEnv(), {Name: "POD_NAMESPACE", ValueFrom: &corev1.EnvVarSource{
				FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}},
			Resources:       resources("10m", "32Mi", "128Mi"),
			SecurityContext: nonRoot(unprivileged()),
			VolumeMounts:    mounts[len(mounts)-1:], // the agent config only
		})
	}
	obj, err := c.build(daemonSet{
		name: NameNodeAgent, component: "node-agent", stage: StagePrereqs,
		configs:    [][]byte{c.agentConfig},
		containers: containers,
		volumes:    vols,
	})
	return Objects{obj}, err
}
